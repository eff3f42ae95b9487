//! `trace --metrics ADDR`: the trace's live metrics over HTTP for Prometheus (`GET /metrics`,
//! OpenMetrics text), served by hyper on the trace's own runtime. Loopback unless the user names
//! another address.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use causeway_probes::{TraceMetrics, METRICS_CONTENT_TYPE};
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};

/// Where `--metrics` without an address serves (the port Prometheus' exporter list leaves free
/// for "generic" exporters is 9464).
pub const DEFAULT_ADDR: &str = "127.0.0.1:9464";

/// A bound listener, before the runtime serves it (so a busy port fails the command at once).
pub struct MetricsListener {
    listener: std::net::TcpListener,
    pub addr: SocketAddr,
}

/// Binds `addr` (`HOST:PORT`; port 0 picks a free one).
pub fn bind(addr: &str) -> anyhow::Result<MetricsListener> {
    let want: SocketAddr =
        addr.parse().with_context(|| format!("--metrics {addr}: not an address like 127.0.0.1:9464"))?;
    let listener = std::net::TcpListener::bind(want).with_context(|| format!("--metrics: cannot listen on {want}"))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        eprintln!("causeway: note: --metrics serves on {addr}, reachable from other hosts (no authentication)");
    }
    Ok(MetricsListener { listener, addr })
}

/// Serves `metrics` until the runtime ends; call from inside the runtime.
pub fn spawn(l: MetricsListener, metrics: Arc<TraceMetrics>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(l.listener)?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let m = metrics.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let m = m.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(&req, &m)) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    Ok(())
}

fn answer(req: &Request<hyper::body::Incoming>, m: &TraceMetrics) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    };
    match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => reply(StatusCode::OK, METRICS_CONTENT_TYPE, m.encode()),
        (&hyper::Method::GET, _) => reply(StatusCode::NOT_FOUND, "text/plain", "causeway serves /metrics\n".into()),
        _ => reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET /metrics\n".into()),
    }
}
