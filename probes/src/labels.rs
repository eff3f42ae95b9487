//! Labels a workload sends while it is traced (its training steps, epochs, tasks), over a Unix
//! socket the trace opens, stored as events of source STEP: one interval each.
//!
//! The protocol is one JSON object per line ([`LabelMessage`]); a client may stay connected and
//! send many. Times are the sender's `CLOCK_MONOTONIC` nanoseconds (Python's `time.monotonic_ns()`,
//! the clock the BPF probes stamp), turned to the trace's unix-ns clock with the offset measured
//! when the socket opened, so a label and the calls inside it line up to the microsecond. A label
//! is either a whole interval (`begin_ns` and `end_ns`) or a `begin` and a later `end` of the same
//! kind and number from the same process. Who sent it comes from the socket (`SO_PEERCRED`) unless
//! the message names the process it labels (`causeway annotate --pid`).
//!
//! The socket is owner-only (mode 0600) by default: a label is data in the trace, so only the user
//! tracing may write one. A refused message is answered (when the client asked for replies) and
//! counted in the trace's notes; the trace goes on.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use causeway_model::codes::{label_op, OpCode};
use causeway_model::Event;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// The environment variable that names the socket: set for a command `trace` launches, read by
/// `causeway annotate` and the Python helper.
pub const LABELS_ENV: &str = "CAUSEWAY_LABELS";

/// The label socket of a trace (`trace --labels-socket`, `--labels-mode`, `--no-labels`).
#[derive(Debug, Clone)]
pub struct LabelOptions {
    /// Open a socket at all.
    pub enabled: bool,
    /// Where (`None`: [`default_socket_path`], or beside it when another trace holds it).
    pub socket: Option<PathBuf>,
    /// Its permission bits (0600: only the tracing user may label).
    pub mode: u32,
}

impl Default for LabelOptions {
    fn default() -> Self {
        LabelOptions { enabled: true, socket: None, mode: 0o600 }
    }
}

/// The longest line a client may send.
const MAX_LINE: usize = 4096;

/// One label, as a client sends it (a JSON object on one line).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelMessage {
    /// `step`, `epoch` or `task`.
    pub kind: String,
    /// The step, epoch or task number.
    pub index: i64,
    /// `begin` or `end` for a label sent in two halves; absent for a whole interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Start of a whole interval, `CLOCK_MONOTONIC` ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_ns: Option<i64>,
    /// End of a whole interval, `CLOCK_MONOTONIC` ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<i64>,
    /// The instant of a `begin` or `end` half, `CLOCK_MONOTONIC` ns (default: when it arrives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts_ns: Option<i64>,
    /// The process the label belongs to (default: the sender's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The thread it belongs to (default: the process's main thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Answer this message with one line: `{"ok":true}` or `{"error":"..."}`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reply: bool,
}

/// Where labels go when no path is given: `$CAUSEWAY_LABELS`, else `/run/causeway/labels.sock`
/// for root, else `$XDG_RUNTIME_DIR/causeway/labels.sock`, else `/tmp/causeway-UID/labels.sock`.
pub fn default_socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os(LABELS_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = if uid == 0 {
        PathBuf::from("/run/causeway")
    } else if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        PathBuf::from(run).join("causeway")
    } else {
        PathBuf::from(format!("/tmp/causeway-{uid}"))
    };
    dir.join("labels.sock")
}

/// Send labels to a trace's socket; with `reply` set on a message, wait for its answer and turn a
/// refusal into an error.
pub fn send_labels(path: &Path, messages: &[LabelMessage]) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let stream = std::os::unix::net::UnixStream::connect(path).map_err(|e| {
        anyhow::anyhow!("cannot reach a trace's label socket at {}: {e} (is `causeway trace` running?)", path.display())
    })?;
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    for m in messages {
        let mut line = serde_json::to_string(m)?;
        line.push('\n');
        writer.write_all(line.as_bytes())?;
        if m.reply {
            let mut answer = String::new();
            reader.read_line(&mut answer)?;
            let v: serde_json::Value = serde_json::from_str(answer.trim())
                .map_err(|e| anyhow::anyhow!("the trace answered {answer:?}: {e}"))?;
            if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
                anyhow::bail!("the trace refused the label: {err}");
            }
        }
    }
    Ok(())
}

/// What the listener hands the trace.
#[derive(Debug)]
pub(crate) enum LabelNews {
    /// A finished interval, as an event of source STEP.
    Label(Event),
    /// A message refused, and why.
    Refused(String),
}

/// The open socket; dropping it stops accepting and removes the socket file.
pub(crate) struct LabelSocket {
    pub(crate) path: PathBuf,
    pub(crate) news: mpsc::UnboundedReceiver<LabelNews>,
    accept: tokio::task::JoinHandle<()>,
    /// `begin` halves never ended, shared with the connections: reported at the end.
    open: std::sync::Arc<std::sync::Mutex<HashMap<OpenKey, Begun>>>,
}

type OpenKey = (u32, OpCode, i64);

#[derive(Debug, Clone, Copy)]
struct Begun {
    ts_ns: i64,
    tid: u32,
}

impl LabelSocket {
    /// Bind `path` (`None`: [`default_socket_path`]) with permission bits `mode`. A stale socket
    /// file is replaced; when the default path is held by another live trace, this trace listens
    /// on `labels-PID-N.sock` beside it (its launched command is told where). An explicit path that
    /// is in use is an error.
    pub(crate) fn open(path: Option<&Path>, mode: u32) -> anyhow::Result<LabelSocket> {
        let explicit = path.is_some();
        let wanted = path.map(Path::to_path_buf).unwrap_or_else(default_socket_path);
        let (listener, path) = match bind(&wanted, mode) {
            Ok(l) => (l, wanted),
            Err(e) if explicit => return Err(e),
            Err(_) => {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let beside = wanted.with_file_name(format!("labels-{}-{n}.sock", std::process::id()));
                (bind(&beside, mode)?, beside)
            }
        };
        let (tx, news) = mpsc::unbounded_channel();
        let open = std::sync::Arc::new(std::sync::Mutex::new(HashMap::new()));
        let offset = crate::decode::mono_to_realtime_offset();
        let shared = open.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, tx.clone(), shared.clone(), offset));
            }
        });
        Ok(LabelSocket { path, news, accept, open })
    }

    /// `begin` halves never ended, as notes.
    pub(crate) fn unfinished(&self) -> Vec<String> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<String> = open
            .keys()
            .map(|(pid, code, index)| format!("{} {index} of pid {pid} began and never ended", code.name()))
            .collect();
        v.sort();
        v
    }
}

impl Drop for LabelSocket {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bind a fresh socket at `path`, replacing a stale file, refusing one a live trace listens on.
fn bind(path: &Path, mode: u32) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        // traversable, not listable: the socket's own mode decides who may connect
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("{} is the label socket of another running trace", path.display());
        }
        std::fs::remove_file(path).map_err(|e| anyhow::anyhow!("cannot replace {}: {e}", path.display()))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o777))?;
    Ok(listener)
}

/// One client: read lines, answer those that ask, pass the labels on.
async fn serve(
    stream: UnixStream,
    tx: mpsc::UnboundedSender<LabelNews>,
    open: std::sync::Arc<std::sync::Mutex<HashMap<OpenKey, Begun>>>,
    offset: i64,
) {
    let peer = stream.peer_cred().ok().and_then(|c| c.pid()).map(|p| p as u32).unwrap_or(0);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        let n = match (&mut lines).take(MAX_LINE as u64 + 1).read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if n > MAX_LINE && !line.ends_with('\n') {
            let _ = tx.send(LabelNews::Refused(format!("a line longer than {MAX_LINE} bytes from pid {peer}")));
            let _ = write.write_all(b"{\"error\":\"line too long\"}\n").await;
            return;
        }
        if line.trim().is_empty() {
            continue;
        }
        let (outcome, reply) = match serde_json::from_str::<LabelMessage>(line.trim()) {
            Ok(m) => {
                let reply = m.reply;
                let mut open = open.lock().unwrap_or_else(|p| p.into_inner());
                (accept(&m, peer, offset, monotonic_ns(), &mut open), reply)
            }
            Err(e) => (Err(format!("not a label: {e}")), true),
        };
        let answer = match outcome {
            Ok(Some(event)) => {
                let _ = tx.send(LabelNews::Label(event));
                "{\"ok\":true}\n".to_string()
            }
            Ok(None) => "{\"ok\":true}\n".to_string(),
            Err(why) => {
                let _ = tx.send(LabelNews::Refused(format!("pid {peer}: {why}")));
                format!("{}\n", serde_json::json!({ "error": why }))
            }
        };
        if reply && write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// `CLOCK_MONOTONIC` now, ns: the clock labels are sent in.
pub fn monotonic_ns() -> i64 {
    crate::decode::clock_ns(libc::CLOCK_MONOTONIC)
}

/// The longest label accepted: a year.
const MAX_LABEL_NS: i64 = 366 * 86_400 * 1_000_000_000;

/// A message checked: the finished interval as an event, nothing yet (a `begin`), or why not.
fn accept(
    m: &LabelMessage,
    peer: u32,
    offset: i64,
    now: i64,
    open: &mut HashMap<OpenKey, Begun>,
) -> Result<Option<Event>, String> {
    let code = label_op(&m.kind).ok_or_else(|| format!("kind `{}`: step, epoch or task", m.kind))?;
    let pid = m.pid.unwrap_or(peer);
    if pid == 0 {
        return Err("no process: the sender's pid is unknown and the message names none".into());
    }
    let tid = m.tid.unwrap_or(pid);
    let interval = |begin: i64, end: i64, tid: u32| -> Result<Option<Event>, String> {
        if end < begin {
            return Err(format!("{} {} ends ({end}) before it begins ({begin})", m.kind, m.index));
        }
        if end - begin > MAX_LABEL_NS {
            return Err(format!("{} {} lasts more than a year", m.kind, m.index));
        }
        Ok(Some(label_event(code, m.index, pid, tid, begin + offset, end - begin)))
    };
    match (m.at.as_deref(), m.begin_ns, m.end_ns) {
        (None, Some(begin), Some(end)) => interval(begin, end, tid),
        (None, _, _) => Err("a whole label needs begin_ns and end_ns (or send at: begin / end)".into()),
        (Some("begin"), None, None) => {
            open.insert((pid, code, m.index), Begun { ts_ns: m.ts_ns.unwrap_or(now), tid });
            Ok(None)
        }
        (Some("end"), None, None) => {
            let begun = open
                .remove(&(pid, code, m.index))
                .ok_or_else(|| format!("{} {} of pid {pid} ended without a begin", m.kind, m.index))?;
            interval(begun.ts_ns, m.ts_ns.unwrap_or(now), begun.tid)
        }
        (Some("begin" | "end"), _, _) => Err("a begin or end half takes ts_ns, not begin_ns/end_ns".into()),
        (Some(other), _, _) => Err(format!("at `{other}`: begin or end")),
    }
}

fn label_event(code: OpCode, index: i64, pid: u32, tid: u32, ts_ns: i64, dur_ns: i64) -> Event {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Event { ts_ns, dur_ns, pid, tid, cpu: -1, source: code.source, op: code.op, arg0: index, comm, ..Event::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(json: &str) -> LabelMessage {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn whole_intervals_and_halves_become_events_on_the_trace_clock() {
        let mut open = HashMap::new();
        let e = accept(&msg(r#"{"kind":"step","index":7,"begin_ns":1000,"end_ns":5000}"#), 42, 10, 0, &mut open)
            .unwrap()
            .unwrap();
        assert_eq!((e.ts_ns, e.dur_ns, e.pid, e.tid, e.source, e.op, e.arg0), (1010, 4000, 42, 42, 10, 1, 7));
        assert!(accept(&msg(r#"{"kind":"epoch","index":2,"at":"begin","ts_ns":100,"tid":43}"#), 42, 0, 0, &mut open)
            .unwrap()
            .is_none());
        let e = accept(&msg(r#"{"kind":"epoch","index":2,"at":"end"}"#), 42, 0, 900, &mut open).unwrap().unwrap();
        assert_eq!((e.ts_ns, e.dur_ns, e.tid, e.op), (100, 800, 43, 2));
        assert!(open.is_empty());
    }

    #[test]
    fn bad_labels_are_refused_with_a_reason() {
        let mut open = HashMap::new();
        let why = |j: &str, open: &mut HashMap<OpenKey, Begun>| accept(&msg(j), 42, 0, 0, open).unwrap_err();
        assert!(why(r#"{"kind":"batch","index":1,"begin_ns":1,"end_ns":2}"#, &mut open).contains("step, epoch or task"));
        assert!(why(r#"{"kind":"step","index":1,"begin_ns":5,"end_ns":2}"#, &mut open).contains("before it begins"));
        assert!(why(r#"{"kind":"step","index":1,"at":"end","ts_ns":5}"#, &mut open).contains("without a begin"));
        assert!(why(r#"{"kind":"step","index":1}"#, &mut open).contains("begin_ns and end_ns"));
        assert!(serde_json::from_str::<LabelMessage>(r#"{"kind":"step","index":1,"colour":"red"}"#).is_err());
        assert!(accept(&msg(r#"{"kind":"step","index":1,"begin_ns":1,"end_ns":2}"#), 0, 0, 0, &mut open).is_err());
    }
}
