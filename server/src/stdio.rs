//! The stdio transport: newline-delimited JSON-RPC on stdin/stdout, logs on stderr only.
//!
//! Between stdin and rmcp sits a line filter: a line that is not JSON gets a JSON-RPC parse error
//! (`-32700`) on stdout, and a line over [`MAX_LINE_BYTES`] an invalid-request error (`-32600`),
//! instead of being dropped in silence; the server keeps serving either way. Lines from rmcp and
//! these errors go to stdout whole, one writer, never interleaved.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::handler::CausewayServer;

/// Longest request line accepted.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// One line read from a stream: its bytes, or the fact that it was too long (and was skipped).
#[derive(Debug, PartialEq)]
pub enum Line {
    Text(Vec<u8>),
    TooLong,
}

/// Read the next newline-terminated line, keeping at most `cap` bytes; `None` at end of input.
pub async fn next_line<R: AsyncBufRead + Unpin>(r: &mut R, cap: usize) -> std::io::Result<Option<Line>> {
    let mut buf = Vec::new();
    let mut too_long = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(match (buf.is_empty(), too_long) {
                (true, false) => None,
                (_, true) => Some(Line::TooLong),
                (false, false) => Some(Line::Text(buf)),
            });
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..i], i + 1),
            None => (avail, avail.len()),
        };
        if buf.len() + chunk.len() > cap {
            too_long = true;
            buf.clear();
        } else if !too_long {
            buf.extend_from_slice(chunk);
        }
        let found_newline = done > chunk.len();
        r.consume(done);
        if found_newline {
            return Ok(Some(if too_long { Line::TooLong } else { Line::Text(buf) }));
        }
    }
}

fn error_line(code: i32, message: String) -> Vec<u8> {
    let v = serde_json::json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}});
    let mut s = serde_json::to_vec(&v).expect("json");
    s.push(b'\n');
    s
}

/// What to do with one input line: pass it to rmcp, answer it with an error, or skip it.
pub fn filter_line(line: &Line) -> Result<Option<&[u8]>, Vec<u8>> {
    match line {
        Line::TooLong => {
            Err(error_line(-32600, format!("Invalid Request: message longer than {MAX_LINE_BYTES} bytes")))
        }
        Line::Text(t) => {
            let t = t.strip_suffix(b"\r").unwrap_or(t);
            if t.iter().all(u8::is_ascii_whitespace) {
                return Ok(None);
            }
            match serde_json::from_slice::<serde::de::IgnoredAny>(t) {
                Ok(_) => Ok(Some(t)),
                Err(e) => Err(error_line(-32700, format!("Parse error: {e}"))),
            }
        }
    }
}

/// Serve one client over stdin/stdout until stdin closes.
pub async fn serve(server: CausewayServer) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let (rmcp_side, our_side) = tokio::io::duplex(1 << 20);
    let (mut from_rmcp, mut to_rmcp) = tokio::io::split(our_side);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(256);

    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let rmcp_out = out_tx.clone();
    let forward_out = tokio::spawn(async move {
        let mut r = BufReader::new(&mut from_rmcp);
        while let Ok(Some(Line::Text(mut line))) = next_line(&mut r, usize::MAX).await {
            line.push(b'\n');
            if rmcp_out.send(line).await.is_err() {
                break;
            }
        }
    });
    let reader = tokio::spawn(async move {
        let mut stdin = BufReader::new(tokio::io::stdin());
        loop {
            match next_line(&mut stdin, MAX_LINE_BYTES).await {
                Ok(Some(line)) => match filter_line(&line) {
                    Ok(Some(msg)) => {
                        if to_rmcp.write_all(msg).await.is_err() || to_rmcp.write_all(b"\n").await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => {}
                    Err(reply) => {
                        tracing::warn!("stdin: answered a malformed message with an error");
                        if out_tx.send(reply).await.is_err() {
                            break;
                        }
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("stdin: {e}");
                    break;
                }
            }
        }
        let _ = to_rmcp.shutdown().await;
    });

    let (r, w) = tokio::io::split(rmcp_side);
    let running = server.serve((r, w)).await?;
    let reason = running.waiting().await;
    tracing::info!("stdio session ended: {reason:?}");
    reader.abort();
    let _ = forward_out.await;
    let _ = writer.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_long_ones_skipped_whole() {
        let input: &[u8] = b"{\"a\":1}\r\n\n0123456789abc\nrest";
        let mut r = BufReader::with_capacity(4, input);
        assert_eq!(next_line(&mut r, 10).await.unwrap(), Some(Line::Text(b"{\"a\":1}\r".to_vec())));
        assert_eq!(next_line(&mut r, 10).await.unwrap(), Some(Line::Text(vec![])));
        assert_eq!(next_line(&mut r, 10).await.unwrap(), Some(Line::TooLong));
        assert_eq!(next_line(&mut r, 10).await.unwrap(), Some(Line::Text(b"rest".to_vec())));
        assert_eq!(next_line(&mut r, 10).await.unwrap(), None);
    }

    #[test]
    fn broken_json_gets_a_parse_error_and_good_json_passes() {
        let err = filter_line(&Line::Text(b"{\"jsonrpc\": \"2.0\", \"id\": 1,".to_vec())).unwrap_err();
        let v: serde_json::Value = serde_json::from_slice(&err).unwrap();
        assert_eq!(v["error"]["code"], -32700);
        assert_eq!(filter_line(&Line::Text(b"{\"a\":1}\r".to_vec())).unwrap(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(filter_line(&Line::Text(b"  ".to_vec())).unwrap(), None);
        let v: serde_json::Value = serde_json::from_slice(&filter_line(&Line::TooLong).unwrap_err()).unwrap();
        assert_eq!(v["error"]["code"], -32600);
    }
}
