//! Serving engines met while tracing: a traced process that is vLLM, SGLang, TGI or Triton (its
//! command line or the engine's files it maps, or an ancestor's: vLLM's engine core is a child of
//! its API server) has its
//! Prometheus endpoint found (its listening ports, the port its command line names, the
//! engine's default) and scraped on a thread of its own at `--serving-scrape-ms`; the metrics of
//! `causeway_model::serving` are stored as `serving_samples`, and what was found as an
//! `attachments` row of kind `serving` (so a trace says whether it holds the engine's metrics).
//!
//! The scraper never blocks the trace: an endpoint that does not answer within a second is
//! tried again at the next scrape, its failures counted and the first one noted.

mod exposition;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_model::serving::ServingEngine;
use causeway_model::{LibraryAttach, ServingSample};

use crate::decode::now_ns;

/// Whether and how to scrape serving engines.
#[derive(Debug, Clone)]
pub struct ServingOptions {
    /// Look at the traced processes for serving engines.
    pub enabled: bool,
    /// Between two scrapes of an endpoint.
    pub scrape_ms: u64,
    /// Endpoints to scrape whatever the traced processes are (`--serving-url`), the engine told by
    /// its metrics' prefix.
    pub urls: Vec<String>,
}

impl Default for ServingOptions {
    fn default() -> Self {
        ServingOptions { enabled: true, scrape_ms: 1000, urls: Vec::new() }
    }
}

/// What the scraper tells the trace.
#[derive(Debug)]
pub(crate) enum ServingMsg {
    /// One scrape's kept samples.
    Samples(Vec<ServingSample>),
    /// An endpoint found (an `attachments` row of kind `serving`).
    Found(LibraryAttach),
    /// Something a reader of the trace must know (an endpoint that stopped answering).
    Note(String),
}

/// The scraper thread; dropped or [`stop`](ServingWatch::stop)ped with the trace.
pub(crate) struct ServingWatch {
    pids: std::sync::mpsc::Sender<u32>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServingWatch {
    /// Start the scraper, unless serving engines are not looked for.
    pub(crate) fn start(
        opts: &ServingOptions,
        tx: tokio::sync::mpsc::UnboundedSender<ServingMsg>,
    ) -> Option<ServingWatch> {
        if !opts.enabled && opts.urls.is_empty() {
            return None;
        }
        let (pids, incoming) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut scraper = Scraper::new(opts, tx);
        let flag = stop.clone();
        let thread =
            std::thread::Builder::new().name("cw-serving".into()).spawn(move || scraper.run(&incoming, &flag)).ok()?;
        Some(ServingWatch { pids, stop, thread: Some(thread) })
    }

    /// A traced process to look at (once; later calls for it are ignored).
    pub(crate) fn consider(&self, pid: u32) {
        let _ = self.pids.send(pid);
    }

    /// Stop after the scrape under way; the samples it sent are on the channel.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A process found to be an engine, its endpoint not found yet.
struct Pending {
    pid: u32,
    engine: &'static ServingEngine,
    /// The processes whose ports may serve the metrics: the engine's process and the ancestors
    /// that run the same engine.
    listeners: Vec<u32>,
    next_try: Instant,
}

/// An endpoint being scraped.
struct Endpoint {
    url: String,
    engine: &'static ServingEngine,
    /// The process listening on it (0: an explicit URL).
    pid: u32,
    next_scrape: Instant,
    failures: u64,
}

struct Scraper {
    tx: tokio::sync::mpsc::UnboundedSender<ServingMsg>,
    agent: ureq::Agent,
    every: Duration,
    look: bool,
    /// Processes looked at, with the command line they had (one that execs is looked at again).
    seen: HashSet<(u32, Vec<String>)>,
    pending: Vec<Pending>,
    endpoints: Vec<Endpoint>,
    /// Explicit URLs whose engine is not known yet.
    explicit: Vec<(String, Instant)>,
    /// Processes not (yet) told to be an engine, looked at again for the engine's files (an
    /// interpreter imports the engine after it starts): (pid, next look, looks left).
    unknown: Vec<(u32, Instant, u32)>,
}

/// How often, and how many times, a process not told to be an engine is looked at again.
const RELOOK_EVERY: Duration = Duration::from_secs(2);
const RELOOKS: u32 = 60;
/// Processes looked at again at most (the first ones traced).
const RELOOK_MAX: usize = 256;

/// How often a process found to be an engine is looked at for its endpoint (a model can take
/// minutes to load before the server listens; a look is a few `/proc` reads and local connects).
const DISCOVERY_EVERY: Duration = Duration::from_millis(500);

impl Scraper {
    fn new(opts: &ServingOptions, tx: tokio::sync::mpsc::UnboundedSender<ServingMsg>) -> Scraper {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(1)))
            .http_status_as_error(true)
            .build()
            .into();
        let now = Instant::now();
        Scraper {
            tx,
            agent,
            every: Duration::from_millis(opts.scrape_ms.max(50)),
            look: opts.enabled,
            seen: HashSet::new(),
            pending: Vec::new(),
            endpoints: Vec::new(),
            explicit: opts.urls.iter().map(|u| (u.clone(), now)).collect(),
            unknown: Vec::new(),
        }
    }

    fn run(&mut self, incoming: &std::sync::mpsc::Receiver<u32>, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            while let Ok(pid) = incoming.try_recv() {
                if self.look && self.seen.insert((pid, cmdline(pid))) && !self.classify(pid) {
                    self.unknown.retain(|u| u.0 != pid);
                    if self.unknown.len() < RELOOK_MAX {
                        self.unknown.push((pid, now + RELOOK_EVERY, RELOOKS));
                    }
                }
            }
            let mut due: Vec<u32> = Vec::new();
            for u in self.unknown.iter_mut().filter(|u| u.1 <= now) {
                u.1 = now + RELOOK_EVERY;
                u.2 -= 1;
                due.push(u.0);
            }
            for pid in due {
                if self.classify(pid) || !crate::process::alive(pid) {
                    self.unknown.retain(|u| u.0 != pid);
                }
            }
            self.unknown.retain(|u| u.2 > 0);
            self.discover(now);
            self.scrape_due(now);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether `pid` (or an ancestor) runs a serving engine; if so, its endpoint is looked for.
    fn classify(&mut self, pid: u32) -> bool {
        let mut listeners = Vec::new();
        let mut engine = None;
        let mut p = pid;
        // the process and three ancestors: vLLM's engine core (a spawned child whose command
        // line is Python's multiprocessing) serves nothing itself; its API server does
        for _ in 0..4 {
            // (the tracer, whose own command line names the one it launched, is no engine)
            if p <= 1 || p == std::process::id() {
                break;
            }
            // its command line, else the files it maps (a server started by a script of its own)
            let maps = || std::fs::read_to_string(format!("/proc/{p}/maps")).unwrap_or_default();
            if let Some(e) = ServingEngine::of_command(&cmdline(p)).or_else(|| ServingEngine::of_maps(&maps())) {
                if engine.is_none_or(|x: &ServingEngine| x.name == e.name) {
                    engine = Some(e);
                    listeners.push(p);
                }
            }
            p = parent(p).unwrap_or(0);
        }
        let Some(engine) = engine else { return false };
        if self.pending.iter().any(|x| x.listeners == listeners)
            || self.endpoints.iter().any(|x| listeners.contains(&x.pid))
        {
            return true;
        }
        self.pending.push(Pending { pid, engine, listeners, next_try: Instant::now() });
        true
    }

    /// Look for the endpoints not found yet.
    fn discover(&mut self, now: Instant) {
        let mut found = Vec::new();
        for p in self.pending.iter_mut().filter(|p| p.next_try <= now) {
            p.next_try = now + DISCOVERY_EVERY;
            for &listener in &p.listeners {
                if let Some((url, port)) = find_endpoint(&self.agent, listener, p.engine) {
                    // the port its command line names may be served by a child (a pyenv or
                    // conda shim runs the interpreter as one): the process that listens
                    let owner = listener_of(port, listener).unwrap_or(listener);
                    found.push((p.pid, Endpoint::new(url, p.engine, owner, now)));
                    break;
                }
            }
        }
        for (pid, endpoint) in found {
            self.pending.retain(|p| p.pid != pid);
            if !self.endpoints.iter().any(|e| e.url == endpoint.url) {
                self.announce(&endpoint, &format!("found from process {pid}'s command line"));
                self.endpoints.push(endpoint);
            }
        }
        self.pending.retain(|p| crate::process::alive(p.pid));
        let mut told = Vec::new();
        for (url, next) in self.explicit.iter_mut().filter(|(_, n)| *n <= now) {
            *next = now + DISCOVERY_EVERY;
            if let Some(engine) = get(&self.agent, url).ok().and_then(|body| engine_of_body(&body)) {
                told.push((url.clone(), engine));
            }
        }
        for (url, engine) in told {
            self.explicit.retain(|(u, _)| *u != url);
            let endpoint = Endpoint::new(url, engine, 0, now);
            self.announce(&endpoint, "given with --serving-url");
            self.endpoints.push(endpoint);
        }
    }

    fn announce(&self, e: &Endpoint, how: &str) {
        let row = LibraryAttach {
            pid: e.pid,
            path: e.url.clone(),
            kind: "serving".into(),
            how: e.engine.name.into(),
            attached_at_ns: now_ns(),
            // histograms and counters are cumulative: the first scrape holds everything before it
            complete: true,
            note: format!(
                "{} metrics at {} ({how}), scraped every {} ms",
                e.engine.title,
                e.url,
                self.every.as_millis()
            ),
            ..Default::default()
        };
        let _ = self.tx.send(ServingMsg::Found(row));
    }

    fn scrape_due(&mut self, now: Instant) {
        let mut notes = Vec::new();
        for i in 0..self.endpoints.len() {
            if self.endpoints[i].next_scrape > now {
                continue;
            }
            // the next one on the grid (a slow answer skips scrapes rather than bunching them)
            let every = self.every;
            let e = &mut self.endpoints[i];
            while e.next_scrape <= now {
                e.next_scrape += every;
            }
            let ts_ns = now_ns();
            let (url, engine, pid) = (e.url.clone(), e.engine, e.pid);
            match get(&self.agent, &url) {
                Ok(body) => {
                    let samples = keep_samples(&body, engine, pid, ts_ns);
                    if !samples.is_empty() {
                        let _ = self.tx.send(ServingMsg::Samples(samples));
                    }
                }
                Err(err) => {
                    let e = &mut self.endpoints[i];
                    e.failures += 1;
                    if e.failures == 1 {
                        notes.push(format!(
                            "{} metrics at {url}: a scrape failed ({err}); tried again each scrape",
                            engine.title
                        ));
                    }
                }
            }
        }
        for n in notes {
            let _ = self.tx.send(ServingMsg::Note(n));
        }
        // an engine whose process is gone serves nothing more
        self.endpoints.retain(|e| e.pid == 0 || crate::process::alive(e.pid));
    }
}

/// The body of a GET (an HTTP error status is an error).
fn get(agent: &ureq::Agent, url: &str) -> Result<String, ureq::Error> {
    agent.get(url).call()?.body_mut().read_to_string()
}

/// The first of the process's candidate ports (the one its command line names, those it listens
/// on, the engine's default) whose `/metrics` is this engine's, and the port.
fn find_endpoint(agent: &ureq::Agent, pid: u32, engine: &'static ServingEngine) -> Option<(String, u16)> {
    let args = cmdline(pid);
    let mut ports: Vec<u16> = engine.port_in_command(&args).into_iter().collect();
    ports.extend(listening_ports(pid));
    ports.push(engine.default_port);
    let mut tried = HashSet::new();
    ports.into_iter().filter(|p| tried.insert(*p)).find_map(|port| {
        let url = format!("http://127.0.0.1:{port}/metrics");
        let body = get(agent, &url).ok()?;
        body.lines().any(|l| l.starts_with(engine.prefix)).then_some((url, port))
    })
}

/// `pid` or the first of its descendants (four generations) that listens on `port`.
fn listener_of(port: u16, pid: u32) -> Option<u32> {
    let mut generation = vec![pid];
    for _ in 0..5 {
        if let Some(&p) = generation.iter().find(|&&p| listening_ports(p).contains(&port)) {
            return Some(p);
        }
        generation = generation.iter().flat_map(|&p| children(p)).collect();
    }
    None
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
                .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
                .collect()
        })
        .unwrap_or_default()
}

impl Endpoint {
    fn new(url: String, engine: &'static ServingEngine, pid: u32, now: Instant) -> Endpoint {
        Endpoint { url, engine, pid, next_scrape: now, failures: 0 }
    }
}

/// The engine whose metrics a body exposes (for an explicit URL).
fn engine_of_body(body: &str) -> Option<&'static ServingEngine> {
    causeway_model::serving::SERVING_ENGINES.iter().find(|e| body.lines().any(|l| l.starts_with(e.prefix)))
}

/// The samples of one scrape the engine's table keeps, as rows: labels but `le` as sorted JSON,
/// `le` as a number; the `+Inf` bucket (the `_count` row holds it) and NaN values left out.
pub(crate) fn keep_samples(body: &str, engine: &'static ServingEngine, pid: u32, ts_ns: i64) -> Vec<ServingSample> {
    let (exposed, _) = exposition::parse(body);
    exposed
        .into_iter()
        .filter(|s| engine.keeps(&s.name) && !s.value.is_nan())
        .filter_map(|s| {
            let mut labels = BTreeMap::new();
            let mut le = None;
            for (k, v) in s.labels {
                if k == "le" {
                    le = Some(exposition::number(&v)?);
                } else {
                    labels.insert(k, v);
                }
            }
            if le.is_some_and(|b: f64| b.is_infinite()) {
                return None;
            }
            Some(ServingSample {
                ts_ns,
                pid,
                engine: engine.name.to_string(),
                metric: s.name,
                labels: serde_json::to_string(&labels).unwrap_or_else(|_| "{}".into()),
                le,
                value: s.value,
            })
        })
        .collect()
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default()
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // after the command name's closing parenthesis: state, then ppid
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The TCP ports `pid` listens on: its socket inodes (`/proc/PID/fd`) among the listening
/// sockets of its network namespace (`/proc/PID/net/tcp` and `tcp6`, state 0A).
pub(crate) fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        ports.extend(listening_in_table(&text, &inodes));
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The local ports of the listening sockets of a `/proc/net/tcp` table whose inode is in `inodes`.
fn listening_in_table(text: &str, inodes: &HashSet<u64>) -> Vec<u16> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?.parse::<u64>().ok()?);
            if *state != "0A" || !inodes.contains(&inode) {
                return None;
            }
            u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vllm_body_keeps_its_tables_metrics_as_rows() {
        let vllm = ServingEngine::named("vllm").unwrap();
        let body = r#"# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:cache_config_info{block_size="16"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN
"#;
        let rows = keep_samples(body, vllm, 77, 5);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(rows[0].labels, r#"{"engine":"0","model_name":"m"}"#, "sorted, whatever the exposed order");
        assert_eq!((rows[0].metric.as_str(), rows[0].value, rows[0].le), ("vllm:num_requests_waiting", 4.0, None));
        assert_eq!(rows[1].le, Some(0.1));
        assert_eq!(rows[2].metric, "vllm:time_to_first_token_seconds_count");
        assert!(rows.iter().all(|r| r.pid == 77 && r.ts_ns == 5 && r.engine == "vllm"));
    }

    #[test]
    fn listening_ports_are_the_processs_own_listeners() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F40 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 20 4 30 10 -1
";
        let ours: HashSet<u64> = [111].into();
        assert_eq!(listening_in_table(table, &ours), vec![8000]);
        // a real listener of this test process
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_ports(std::process::id()).contains(&port));
    }

    #[test]
    fn an_ancestor_and_the_parent_field() {
        assert_eq!(parent(std::process::id()), Some(std::os::unix::process::parent_id()));
    }

    #[test]
    fn the_listener_is_found_among_the_descendants() {
        // a child that listens: found from this process, two generations up at most
        let mut child = std::process::Command::new("python3")
            .args(["-c", "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let port: u16 = line.trim().parse().unwrap();
        let found = listener_of(port, std::process::id());
        // the child, or its own child where `python3` is a shim that forks the interpreter
        let listens = found.is_some_and(|p| p != std::process::id() && listening_ports(p).contains(&port));
        let _ = child.kill();
        let _ = child.wait();
        assert!(listens, "{found:?}");
        assert_eq!(listener_of(1, std::process::id()), None);
    }
}
