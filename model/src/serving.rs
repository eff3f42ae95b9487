//! The serving engines Causeway recognizes and the metrics of theirs it keeps: one table, read by
//! the probes (which processes are engines, what to scrape) and by the analysis (which stored
//! metric is the time to first token, the queue, the KV cache).
//!
//! Names are the engines' own, as their Prometheus endpoints expose them (vLLM V1, with the V0
//! names it replaced; SGLang; Text Generation Inference; Triton Inference Server).

/// What a latency figure of an engine measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LatencyKind {
    /// From a request's arrival to its first output token (prefill and the queue before it).
    TimeToFirstToken,
    /// Between two output tokens of a request (one decode step, as the request saw it).
    InterToken,
    /// A request's whole time in the engine.
    EndToEnd,
    /// A request's time waiting to be scheduled.
    Queue,
}

impl LatencyKind {
    /// Short name for answers ("TTFT", ...).
    pub fn label(self) -> &'static str {
        match self {
            LatencyKind::TimeToFirstToken => "TTFT",
            LatencyKind::InterToken => "inter-token latency",
            LatencyKind::EndToEnd => "end-to-end latency",
            LatencyKind::Queue => "queue time",
        }
    }
}

/// Where one latency figure is in an engine's metrics: a histogram (`family` with `_bucket`,
/// `_sum`, `_count`), or a pair of cumulative counters (`sum` over `count`, Triton's way).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyMetric {
    /// What it measures.
    pub kind: LatencyKind,
    /// The histogram family (`vllm:time_to_first_token_seconds`), or the sum counter.
    pub family: &'static str,
    /// For a counter pair: the count counter (requests). `None`: `family` is a histogram.
    pub count_counter: Option<&'static str>,
    /// Seconds per unit of the values (1 for seconds, 1e-6 for Triton's microseconds).
    pub seconds_per_unit: f64,
}

impl LatencyMetric {
    const fn histogram(kind: LatencyKind, family: &'static str) -> LatencyMetric {
        LatencyMetric { kind, family, count_counter: None, seconds_per_unit: 1.0 }
    }
    /// The stored name of the running sum.
    pub fn sum_metric(&self) -> String {
        match self.count_counter {
            Some(_) => self.family.to_string(),
            None => format!("{}_sum", self.family),
        }
    }
    /// The stored name of the running count.
    pub fn count_metric(&self) -> String {
        match self.count_counter {
            Some(c) => c.to_string(),
            None => format!("{}_count", self.family),
        }
    }
    /// The stored name of the buckets, if a histogram.
    pub fn bucket_metric(&self) -> Option<String> {
        self.count_counter.is_none().then(|| format!("{}_bucket", self.family))
    }
}

/// One serving engine: how its processes are told, and the metrics kept from its endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServingEngine {
    /// Stored name (`serving_samples.engine`).
    pub name: &'static str,
    /// Shown name.
    pub title: &'static str,
    /// Every metric of the engine starts with this (an endpoint is the engine's when it does).
    pub prefix: &'static str,
    /// Program names (the basename of an argument that is the program) that are this engine.
    pub programs: &'static [&'static str],
    /// Python modules (`-m MODULE`, or an argument starting with one) that are this engine.
    pub modules: &'static [&'static str],
    /// Path fragments of the files only this engine maps (its compiled extensions, its server
    /// library): how a process started by a script of the user's own is told.
    pub mapped: &'static [&'static str],
    /// The port it serves its metrics on when its command line does not say.
    pub default_port: u16,
    /// The command-line option naming the metrics port, if another than `--port`.
    pub metrics_port_option: Option<&'static str>,
    /// Gauges of requests being run (first present wins).
    pub running: &'static [&'static str],
    /// Gauges of requests waiting to be scheduled.
    pub waiting: &'static [&'static str],
    /// Gauges of KV-cache use as a fraction 0..1.
    pub kv_cache: &'static [&'static str],
    /// Latency figures.
    pub latencies: &'static [LatencyMetric],
    /// Cumulative counters kept as they are (tokens, preemptions).
    pub counters: &'static [&'static str],
}

use LatencyKind::*;

/// Every engine Causeway recognizes.
pub const SERVING_ENGINES: [ServingEngine; 4] = [
    ServingEngine {
        name: "vllm",
        title: "vLLM",
        prefix: "vllm:",
        programs: &["vllm"],
        modules: &["vllm.entrypoints", "vllm"],
        mapped: &["/vllm/_C.", "/vllm/_moe_C.", "/vllm/cumem_allocator."],
        default_port: 8000,
        metrics_port_option: None,
        running: &["vllm:num_requests_running"],
        waiting: &["vllm:num_requests_waiting"],
        kv_cache: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        latencies: &[
            LatencyMetric::histogram(TimeToFirstToken, "vllm:time_to_first_token_seconds"),
            LatencyMetric::histogram(InterToken, "vllm:inter_token_latency_seconds"),
            LatencyMetric::histogram(InterToken, "vllm:time_per_output_token_seconds"),
            LatencyMetric::histogram(EndToEnd, "vllm:e2e_request_latency_seconds"),
            LatencyMetric::histogram(Queue, "vllm:request_queue_time_seconds"),
        ],
        counters: &["vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total"],
    },
    ServingEngine {
        name: "sglang",
        title: "SGLang",
        prefix: "sglang:",
        programs: &[],
        modules: &["sglang.launch_server", "sglang.srt"],
        mapped: &["/sgl_kernel/"],
        default_port: 30000,
        metrics_port_option: None,
        running: &["sglang:num_running_reqs"],
        waiting: &["sglang:num_queue_reqs"],
        kv_cache: &["sglang:token_usage"],
        latencies: &[
            LatencyMetric::histogram(TimeToFirstToken, "sglang:time_to_first_token_seconds"),
            LatencyMetric::histogram(InterToken, "sglang:inter_token_latency_seconds"),
            LatencyMetric::histogram(InterToken, "sglang:time_per_output_token_seconds"),
            LatencyMetric::histogram(EndToEnd, "sglang:e2e_request_latency_seconds"),
        ],
        counters: &["sglang:prompt_tokens_total", "sglang:generation_tokens_total"],
    },
    ServingEngine {
        name: "tgi",
        title: "Text Generation Inference",
        prefix: "tgi_",
        programs: &["text-generation-launcher", "text-generation-router", "text-generation-server"],
        modules: &["text_generation_server"],
        mapped: &["/text_generation_server/"],
        default_port: 3000,
        metrics_port_option: None,
        running: &["tgi_batch_current_size"],
        waiting: &["tgi_queue_size"],
        kv_cache: &[],
        latencies: &[
            LatencyMetric::histogram(Queue, "tgi_request_queue_duration"),
            LatencyMetric::histogram(InterToken, "tgi_request_mean_time_per_token_duration"),
            LatencyMetric::histogram(EndToEnd, "tgi_request_duration"),
        ],
        counters: &["tgi_request_success", "tgi_request_generated_tokens_sum"],
    },
    ServingEngine {
        name: "triton",
        title: "Triton Inference Server",
        prefix: "nv_inference_",
        programs: &["tritonserver"],
        modules: &[],
        mapped: &["/libtritonserver.so"],
        default_port: 8002,
        metrics_port_option: Some("--metrics-port"),
        running: &[],
        waiting: &["nv_inference_pending_request_count"],
        kv_cache: &[],
        latencies: &[
            LatencyMetric {
                kind: Queue,
                family: "nv_inference_queue_duration_us",
                count_counter: Some("nv_inference_request_success"),
                seconds_per_unit: 1e-6,
            },
            LatencyMetric {
                kind: EndToEnd,
                family: "nv_inference_request_duration_us",
                count_counter: Some("nv_inference_request_success"),
                seconds_per_unit: 1e-6,
            },
        ],
        counters: &["nv_inference_request_success", "nv_inference_request_failure"],
    },
];

impl ServingEngine {
    /// The engine stored as `name`.
    pub fn named(name: &str) -> Option<&'static ServingEngine> {
        SERVING_ENGINES.iter().find(|e| e.name == name)
    }

    /// The engine a command line runs, if any: a program argument named like the engine's
    /// (`/usr/local/bin/vllm serve ...`, `tritonserver`), or a Python module of it (`python -m
    /// vllm.entrypoints.openai.api_server`, `-m sglang.launch_server`).
    pub fn of_command(args: &[String]) -> Option<&'static ServingEngine> {
        let basename = |a: &str| a.rsplit('/').next().unwrap_or(a).to_string();
        // the program and, for an interpreter, the script: the first two arguments
        let programs: Vec<String> = args.iter().take(2).map(|a| basename(a)).collect();
        let module = args.windows(2).find(|w| w[0] == "-m").map(|w| w[1].as_str());
        SERVING_ENGINES.iter().find(|e| {
            programs.iter().any(|p| e.programs.contains(&p.as_str()))
                || module.is_some_and(|m| e.modules.iter().any(|x| m == *x || m.starts_with(&format!("{x}."))))
        })
    }

    /// The engine whose files a process maps (`/proc/PID/maps` lines), if any.
    pub fn of_maps(maps: &str) -> Option<&'static ServingEngine> {
        SERVING_ENGINES.iter().find(|e| maps.lines().any(|l| e.mapped.iter().any(|m| l.contains(m))))
    }

    /// Whether a sample name is one the engine's metrics keep (a histogram's parts included).
    pub fn keeps(&self, metric: &str) -> bool {
        let family = |m: &str| ["_bucket", "_sum", "_count"].iter().find_map(|s| m.strip_suffix(s)).map(str::to_string);
        let plain = [self.running, self.waiting, self.kv_cache, self.counters];
        plain.iter().any(|names| names.contains(&metric))
            || self.latencies.iter().any(|l| match l.count_counter {
                Some(count) => metric == l.family || metric == count,
                None => family(metric).as_deref() == Some(l.family),
            })
    }

    /// The port the command line names for the metrics (`--port N`, `--port=N`, or the engine's
    /// own metrics option).
    pub fn port_in_command(&self, args: &[String]) -> Option<u16> {
        let option = self.metrics_port_option.unwrap_or("--port");
        args.iter().enumerate().find_map(|(i, a)| {
            let value =
                if a == option { args.get(i + 1).map(String::as_str) } else { a.strip_prefix(&format!("{option}=")) };
            value.and_then(|v| v.parse().ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn engines_are_told_by_program_or_module() {
        let name = |s: &str| ServingEngine::of_command(&args(s)).map(|e| e.name);
        assert_eq!(
            name("/usr/bin/python3 /usr/local/bin/vllm serve meta-llama/Llama-3.1-8B --port 8001"),
            Some("vllm")
        );
        assert_eq!(name("python3 -m vllm.entrypoints.openai.api_server --model m"), Some("vllm"));
        assert_eq!(name("python -m sglang.launch_server --model-path m --port 30001"), Some("sglang"));
        assert_eq!(name("/usr/local/bin/text-generation-launcher --model-id m"), Some("tgi"));
        assert_eq!(name("tritonserver --model-repository=/models"), Some("triton"));
        assert_eq!(name("python3 train.py --vllm-like serve"), None);
        assert_eq!(name("python3 -m vllmx.server"), None, "a module is matched whole");
        assert_eq!(name(""), None);
    }

    #[test]
    fn engines_are_told_by_the_files_they_map() {
        let line = |path: &str| format!("7f2a1c000000-7f2a1c200000 r-xp 00000000 08:01 123 {path}\n");
        let vllm = line("/opt/venv/lib/python3.12/site-packages/vllm/_C.abi3.so");
        let maps = format!("{}{vllm}", line("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert_eq!(ServingEngine::of_maps(&maps).map(|e| e.name), Some("vllm"));
        let triton = line("/opt/tritonserver/lib/libtritonserver.so");
        assert_eq!(ServingEngine::of_maps(&triton).map(|e| e.name), Some("triton"));
        assert_eq!(ServingEngine::of_maps(&line("/home/u/vllm_notes/_C.txt")), None);
        assert_eq!(ServingEngine::of_maps(""), None);
    }

    #[test]
    fn ports_come_from_the_engines_option() {
        let vllm = ServingEngine::named("vllm").unwrap();
        assert_eq!(vllm.port_in_command(&args("vllm serve m --port 8001")), Some(8001));
        assert_eq!(vllm.port_in_command(&args("vllm serve m --port=9000")), Some(9000));
        assert_eq!(vllm.port_in_command(&args("vllm serve m --port x")), None);
        let triton = ServingEngine::named("triton").unwrap();
        assert_eq!(triton.port_in_command(&args("tritonserver --port 1 --metrics-port 8102")), Some(8102));
    }

    #[test]
    fn kept_metrics_are_the_tables_and_a_histograms_parts() {
        let vllm = ServingEngine::named("vllm").unwrap();
        for m in [
            "vllm:num_requests_waiting",
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:time_to_first_token_seconds_sum",
            "vllm:time_to_first_token_seconds_count",
            "vllm:generation_tokens_total",
        ] {
            assert!(vllm.keeps(m), "{m}");
        }
        for m in ["vllm:time_to_first_token_seconds", "vllm:cache_config_info", "python_gc_objects_collected_total"] {
            assert!(!vllm.keeps(m), "{m}");
        }
        let triton = ServingEngine::named("triton").unwrap();
        assert!(triton.keeps("nv_inference_queue_duration_us") && triton.keeps("nv_inference_request_success"));
        let ttft = &vllm.latencies[0];
        assert_eq!(ttft.bucket_metric().as_deref(), Some("vllm:time_to_first_token_seconds_bucket"));
        assert_eq!(triton.latencies[0].count_metric(), "nv_inference_request_success");
    }
}
