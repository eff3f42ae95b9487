//! The prompts, from the text files in `prompts/` (built into the binary): `investigate` (optional
//! `focus`: a pid or an op), `compare-runs` (optional `baseline`, `candidate`) and `explain-chain`
//! (`chain_id`, optional `trace`), and `investigate-fleet` (a lake served with `--lake`). Each tells the agent which tools to call in what order, to use only
//! numbers that tools returned, and to verify a chain with its evidence SQL through `run_sql`.

use std::collections::BTreeMap;

use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};

use crate::sanitize::sanitize_str;

const INVESTIGATE: &str = include_str!("../../prompts/investigate.md");
const COMPARE_RUNS: &str = include_str!("../../prompts/compare-runs.md");
const EXPLAIN_CHAIN: &str = include_str!("../../prompts/explain-chain.md");
const INVESTIGATE_FLEET: &str = include_str!("../../prompts/investigate-fleet.md");

/// Longest argument value put into a prompt.
const MAX_ARG_CHARS: usize = 200;

fn arg(name: &str, description: &str, required: bool) -> PromptArgument {
    PromptArgument::new(name).with_description(description).with_required(required)
}

/// Every prompt, in the order `prompts/list` gives them.
pub fn list() -> Vec<Prompt> {
    vec![
        Prompt::new(
            "investigate",
            Some("Find out why the GPU stalled in a trace: stats, causal chains verified with their SQL, timeline, then a report that uses only the tools' numbers."),
            Some(vec![arg("focus", "Optional: a pid (e.g. 4242) or an op (e.g. cudaStreamSync) to focus on.", false)]),
        )
        .with_title("Investigate a GPU stall"),
        Prompt::new(
            "compare-runs",
            Some("Compare two runs (or two windows of one run): what got slower or faster and which chains explain it."),
            Some(vec![
                arg("baseline", "Optional: the reference trace (name or index from list_traces). Default: trace 0, or the first half of a single trace.", false),
                arg("candidate", "Optional: the trace to compare. Default: trace 1, or the second half of a single trace.", false),
            ]),
        )
        .with_title("Compare two runs"),
        Prompt::new(
            "explain-chain",
            Some("Explain one causal chain in plain language after verifying its evidence SQL."),
            Some(vec![
                arg("chain_id", "The chain id from get_causal_chains, e.g. c1.", true),
                arg("trace", "Optional: the trace the chain belongs to (name from list_traces; default: the first).", false),
            ]),
        )
        .with_title("Explain a causal chain"),
        Prompt::new(
            "investigate-fleet",
            Some("Find the rank that held a distributed job back across a fleet lake: nodes, clocks, stragglers, then the late node's own chains, verified."),
            None,
        )
        .with_title("Investigate a fleet"),
    ]
}

fn value(args: &BTreeMap<String, String>, key: &str) -> Option<String> {
    args.get(key).map(|v| sanitize_str(v.trim(), MAX_ARG_CHARS)).filter(|v| !v.is_empty())
}

/// The messages of prompt `name`, or an error for an unknown prompt or a missing argument.
pub fn get(name: &str, args: &BTreeMap<String, String>, default_trace: &str) -> Result<GetPromptResult, String> {
    let (text, description) = match name {
        "investigate" => {
            let focus = match value(args, "focus") {
                Some(f) if f.parse::<u32>().is_ok() => format!(
                    "Focus on process {f}: pass `pid: {f}` to get_trace_stats, get_causal_chains, get_stacks and get_timeline."
                ),
                Some(f) => format!(
                    "Focus on the op `{f}`: pass `ops: [\"{f}\"]` to get_trace_stats and `op: \"{f}\"` to get_causal_chains and get_stacks."
                ),
                None => "No focus was given: study the whole trace, worst findings first.".to_string(),
            };
            (INVESTIGATE.replace("{{focus}}", &focus), "Investigate a GPU stall")
        }
        "compare-runs" => {
            let b = value(args, "baseline")
                .map(|t| format!("trace `{t}`"))
                .unwrap_or_else(|| "the default (trace 0, or the first half of a single trace)".into());
            let c = value(args, "candidate")
                .map(|t| format!("trace `{t}`"))
                .unwrap_or_else(|| "the default (trace 1, or the second half of a single trace)".into());
            (COMPARE_RUNS.replace("{{baseline}}", &b).replace("{{candidate}}", &c), "Compare two runs")
        }
        "explain-chain" => {
            let id = value(args, "chain_id")
                .ok_or("the prompt explain-chain needs the argument chain_id (e.g. c1, from get_causal_chains)")?;
            let trace = value(args, "trace");
            let trace_arg = trace.as_ref().map(|t| format!(" and `trace: \"{t}\"`")).unwrap_or_default();
            let text = EXPLAIN_CHAIN
                .replace("{{chain_id}}", &id)
                .replace("{{trace_arg}}", &trace_arg)
                .replace("{{trace}}", trace.as_deref().unwrap_or(default_trace));
            (text, "Explain a causal chain")
        }
        "investigate-fleet" => (INVESTIGATE_FLEET.to_string(), "Investigate a fleet"),
        other => {
            return Err(format!(
                "no prompt '{}': this server has investigate, compare-runs, explain-chain, investigate-fleet",
                sanitize_str(other, 100)
            ))
        }
    };
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).with_description(description))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &GetPromptResult) -> String {
        r.messages[0].content.as_text().expect("text").text.clone()
    }

    #[test]
    fn prompts_fill_their_arguments_and_name_the_tools() {
        let mut a = BTreeMap::new();
        a.insert("focus".to_string(), "4242".to_string());
        let t = text(&get("investigate", &a, "t0").unwrap());
        assert!(t.contains("pid: 4242") && t.contains("get_causal_chains") && t.contains("run_sql"), "{t}");
        assert!(!t.contains("{{"));
        a.clear();
        a.insert("chain_id".into(), "c2".into());
        let t = text(&get("explain-chain", &a, "t0").unwrap());
        assert!(t.contains("chain_id: \"c2\"") && t.contains("causeway://traces/t0/chains/c2"), "{t}");
        assert!(!t.contains("{{"));
        assert!(get("explain-chain", &BTreeMap::new(), "t0").unwrap_err().contains("chain_id"));
        assert!(!text(&get("compare-runs", &BTreeMap::new(), "t0").unwrap()).contains("{{"));
        assert!(get("nope", &BTreeMap::new(), "t0").is_err());
    }

    #[test]
    fn every_prompt_says_to_use_only_tool_numbers() {
        for p in list() {
            let mut a = BTreeMap::new();
            a.insert("chain_id".to_string(), "c1".to_string());
            let t = text(&get(&p.name, &a, "t0").unwrap());
            assert!(t.contains("only numbers that a tool returned"), "{}", p.name);
            assert!(t.contains("evidence.sql"), "{}", p.name);
        }
    }
}
