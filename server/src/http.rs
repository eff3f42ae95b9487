//! Streamable HTTP at `/mcp`, hardened: loopback bind by default (a non-loopback bind without a
//! token is refused at start), `Host` and `Origin` allow-lists (403 otherwise, checked by rmcp), a
//! bearer token from `CAUSEWAY_MCP_TOKEN` compared in constant time (401 otherwise), a request body
//! cap (413), and on every response a byte cap and a deadline past which the stream is ended.
//! Sessions for clients of the 2025 revisions; 2026-07-28 requests are served statelessly by rmcp.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::handler::CausewayServer;

/// Environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "CAUSEWAY_MCP_TOKEN";
/// Default request body cap.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Default cap on one response's bytes.
pub const DEFAULT_RESPONSE_CAP_BYTES: usize = 8 << 20;

/// How the HTTP server runs.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub bind: SocketAddr,
    /// Required when `bind` is not loopback; when set, every request must carry it.
    pub token: Option<String>,
    /// Extra `Host` values (hostnames or host:port) besides the loopback names and the bind address.
    pub extra_hosts: Vec<String>,
    /// Extra allowed `Origin`s (scheme://host[:port|:*]) besides loopback origins.
    pub extra_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub response_cap_bytes: usize,
    /// Time limit of one request: a tool past it answers `isError`; 5 s later the HTTP exchange
    /// itself is ended (504, or the end of the response stream).
    pub request_timeout: Duration,
}

/// Compare two secrets in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    diff == 0
}

/// True when the request carries `Authorization: Bearer <token>`.
pub fn authorized(headers: &http::HeaderMap, token: &str) -> bool {
    let Some(v) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return false };
    let Some(given) = v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")) else { return false };
    constant_time_eq(given.trim().as_bytes(), token.as_bytes())
}

/// Refuse configurations that would expose the traces: a non-loopback bind without a token.
pub fn check_bind(opts: &HttpOptions) -> anyhow::Result<()> {
    if !opts.bind.ip().is_loopback() && opts.token.as_deref().is_none_or(str::is_empty) {
        anyhow::bail!(
            "refusing to serve on {} (not a loopback address) without a token: set {TOKEN_ENV} to a secret, or bind 127.0.0.1",
            opts.bind
        );
    }
    if opts.token.as_deref().is_some_and(|t| t.len() < 16) {
        anyhow::bail!("{TOKEN_ENV} is shorter than 16 characters: use a longer random secret");
    }
    Ok(())
}

/// The rmcp configuration: allow-lists, body cap, cancellation.
/// Loopback origins are allowed on the server's own `port` only.
pub fn rmcp_config(opts: &HttpOptions, port: u16, ct: CancellationToken) -> StreamableHttpServerConfig {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !opts.bind.ip().is_unspecified() {
        hosts.push(opts.bind.ip().to_string());
    }
    hosts.extend(opts.extra_hosts.iter().cloned());
    let mut origins: Vec<String> =
        ["http://localhost", "http://127.0.0.1", "http://[::1]"].iter().map(|o| format!("{o}:{port}")).collect();
    origins.extend(opts.extra_origins.iter().cloned());
    StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(opts.max_body_bytes)
        .with_cancellation_token(ct)
}

/// A response body that ends after `cap` bytes or at `deadline`, whichever comes first.
pub struct CappedBody {
    inner: BoxBody<Bytes, Infallible>,
    sent: usize,
    cap: usize,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    ended: bool,
}

impl CappedBody {
    pub fn new(inner: BoxBody<Bytes, Infallible>, cap: usize, deadline: Option<Duration>) -> CappedBody {
        CappedBody { inner, sent: 0, cap, deadline: deadline.map(|d| Box::pin(tokio::time::sleep(d))), ended: false }
    }
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(d) = self.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                tracing::warn!("http: a response stream ran past the request time limit and was ended");
                self.ended = true;
                return Poll::Ready(None);
            }
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, Bytes::len);
                if self.sent + len > self.cap {
                    tracing::warn!("http: a response passed the cap of {} bytes and was ended", self.cap);
                    self.ended = true;
                    return Poll::Ready(None);
                }
                self.sent += len;
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }
}

fn plain(status: StatusCode, text: &str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *r.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
    }
    r
}

/// Serve until ctrl-c / SIGTERM. Prints the URL on stderr once listening.
pub async fn serve(server: CausewayServer, opts: HttpOptions) -> anyhow::Result<()> {
    check_bind(&opts)?;
    let listener = tokio::net::TcpListener::bind(opts.bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", opts.bind))?;
    let local = listener.local_addr()?;
    let ct = CancellationToken::new();
    let factory = server.clone();
    let config = rmcp_config(&opts, local.port(), ct.child_token());
    let mcp = StreamableHttpService::new(
        move || Ok(factory.for_new_session()),
        LocalSessionManager::default().into(),
        config,
    );
    eprintln!(
        "causeway mcp: listening on http://{local}/mcp ({} trace(s){})",
        server.0.traces.len(),
        if opts.token.is_some() { ", bearer token required" } else { "" }
    );
    // A tool that runs longer by design (capture_trace) raises the deadline of a response stream.
    let longest = server.0.tools.iter().map(|t| t.min_timeout).max().unwrap_or_default();
    let stream_deadline = opts.request_timeout.max(longest) + Duration::from_secs(5);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let (tcp, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(x) => x,
                Err(e) => { tracing::warn!("accept: {e}"); continue; }
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
        };
        let (mcp, opts) = (mcp.clone(), opts.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (mcp, opts) = (mcp.clone(), opts.clone());
                async move {
                    let is_post = req.method() == http::Method::POST;
                    let resp = if req.uri().path() != "/mcp" {
                        plain(StatusCode::NOT_FOUND, "Not Found: the MCP endpoint is /mcp")
                    } else if opts.token.as_deref().is_some_and(|t| !authorized(req.headers(), t)) {
                        plain(StatusCode::UNAUTHORIZED, "Unauthorized: send Authorization: Bearer <CAUSEWAY_MCP_TOKEN>")
                    } else {
                        match tokio::time::timeout(stream_deadline, mcp.handle(req)).await {
                            Ok(r) => r,
                            Err(_) => {
                                plain(StatusCode::GATEWAY_TIMEOUT, "the request ran past the server's time limit")
                            }
                        }
                    };
                    let (parts, body) = resp.into_parts();
                    let body = CappedBody::new(body, opts.response_cap_bytes, is_post.then_some(stream_deadline));
                    Ok::<_, Infallible>(Response::from_parts(parts, body))
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tcp), service);
            if let Err(e) = conn.await {
                tracing::debug!("http connection from {peer}: {e}");
            }
        });
    }
    ct.cancel();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(bind: &str, token: Option<&str>) -> HttpOptions {
        HttpOptions {
            bind: bind.parse().unwrap(),
            token: token.map(String::from),
            extra_hosts: vec![],
            extra_origins: vec![],
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            response_cap_bytes: DEFAULT_RESPONSE_CAP_BYTES,
            request_timeout: crate::handler::DEFAULT_REQUEST_TIMEOUT,
        }
    }

    #[test]
    fn tokens_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"secret-token-123", b"secret-token-123"));
        assert!(!constant_time_eq(b"secret-token-123", b"secret-token-124"));
        assert!(!constant_time_eq(b"secret", b"secret-token-123"));
        assert!(!constant_time_eq(b"", b"x"));
        let mut h = http::HeaderMap::new();
        assert!(!authorized(&h, "0123456789abcdef"));
        h.insert(http::header::AUTHORIZATION, "Bearer 0123456789abcdef".parse().unwrap());
        assert!(authorized(&h, "0123456789abcdef"));
        assert!(!authorized(&h, "0123456789abcdeg"));
    }

    #[test]
    fn a_public_bind_needs_a_long_token() {
        assert!(check_bind(&opts("127.0.0.1:0", None)).is_ok());
        assert!(check_bind(&opts("[::1]:0", None)).is_ok());
        let e = check_bind(&opts("0.0.0.0:8080", None)).unwrap_err().to_string();
        assert!(e.contains(TOKEN_ENV), "{e}");
        assert!(check_bind(&opts("0.0.0.0:8080", Some("short"))).is_err());
        assert!(check_bind(&opts("0.0.0.0:8080", Some("a-long-random-secret"))).is_ok());
    }

    #[tokio::test]
    async fn capped_body_ends_at_the_cap() {
        let inner = Full::new(Bytes::from(vec![b'x'; 100])).boxed();
        let collected = CappedBody::new(inner, 10, None).collect().await.unwrap().to_bytes();
        assert!(collected.is_empty(), "a frame over the cap is not sent");
        let inner = Full::new(Bytes::from(vec![b'x'; 10])).boxed();
        assert_eq!(CappedBody::new(inner, 10, None).collect().await.unwrap().to_bytes().len(), 10);
    }
}
