//! The Prometheus text exposition format (version 0.0.4, and OpenMetrics text, which it
//! reads the same way): the sample lines a serving engine's `/metrics` answers with, as
//! (name, labels, value). Comments (`# HELP`, `# TYPE`, `# EOF`) carry nothing a sample's own
//! name does not (a histogram's parts end `_bucket`, `_sum`, `_count`).
//!
//! Written here rather than taken from a crate: `prometheus-parse` reads names as `\w+`, which
//! refuses vLLM's and SGLang's (`vllm:num_requests_waiting`: the colon is legal in a metric
//! name), and splits labels at commas, which label values may hold; `openmetrics-parser` is
//! LGPL.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exposed {
    pub name: String,
    /// In the order exposed.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Every sample line of `text`, and how many lines were not samples nor comments (malformed:
/// skipped, never a reason to lose the others).
pub(crate) fn parse(text: &str) -> (Vec<Exposed>, usize) {
    let mut samples = Vec::new();
    let mut refused = 0;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match sample(line) {
            Some(s) => samples.push(s),
            None => refused += 1,
        }
    }
    (samples, refused)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

/// `name{label="value",...} value [timestamp]`.
fn sample(line: &str) -> Option<Exposed> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if !name.starts_with(is_name_start) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = number(fields.next()?)?;
    // an optional timestamp (ms), then nothing
    if let Some(ts) = fields.next() {
        ts.parse::<f64>().ok()?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some(Exposed { name: name.to_string(), labels, value })
}

/// The labels after `{`, up to and including `}`; what follows it.
fn label_set(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let name_end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        let name = &s[..name_end];
        if name.is_empty() {
            return None;
        }
        s = s[name_end..].trim_start().strip_prefix('=')?.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((name.to_string(), value));
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}

/// A sample value: a float, or `+Inf` / `-Inf` / `NaN` as the format spells them.
pub(crate) fn number(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_lines_parse_with_their_colons_labels_and_buckets() {
        let text = r#"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="m"} 17.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 20.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.25e+00
odd_label{path="a,b=\"c\"\\d\n",} 1 1700000000000
process_start_time_seconds 1.7e9
this is not a sample
bad{unterminated="x} 1
"#;
        let (samples, refused) = parse(text);
        assert_eq!(refused, 2);
        assert_eq!(samples.len(), 6);
        assert_eq!(samples[0].name, "vllm:num_requests_waiting");
        assert_eq!(
            samples[0].labels,
            vec![("engine".into(), "0".into()), ("model_name".into(), "meta-llama/Llama-3.1-8B".into())]
        );
        assert_eq!(samples[0].value, 3.0);
        assert_eq!(samples[1].labels[1], ("le".into(), "0.04".into()));
        assert_eq!(samples[2].labels[1].1, "+Inf");
        assert_eq!(samples[3].value, 1.25);
        assert_eq!(samples[4].labels, vec![("path".into(), "a,b=\"c\"\\d\n".into())]);
        assert_eq!(samples[5].value, 1.7e9);
    }

    #[test]
    fn special_values() {
        assert_eq!(number("+Inf"), Some(f64::INFINITY));
        assert_eq!(number("-Inf"), Some(f64::NEG_INFINITY));
        assert!(number("NaN").unwrap().is_nan());
        assert_eq!(number("2.5e-3"), Some(0.0025));
        assert_eq!(number("x"), None);
    }
}
