//! What a GPU-hour costs: a small built-in table of list prices by GPU model, a config file and
//! `--gpu-rate` over it. Nothing is fetched from the network; a model the table and the file do
//! not name has no rate (the answer says so instead of guessing).
//!
//! Precedence: `--gpu-rate` (one rate for every GPU of the trace), then the config file, then the
//! built-in table. The config file is JSON, an object of dollars per GPU-hour keyed by the NVML
//! name (`"NVIDIA H200"`) or by the family this module names (`"H200"`, `"A100 80GB"`), matched
//! case-insensitively, the full name first:
//!
//! ```json
//! { "H200": 3.50, "NVIDIA A100-SXM4-80GB": 1.79 }
//! ```
//!
//! Its path: `$CAUSEWAY_GPU_RATES`, else `$XDG_CONFIG_HOME/causeway/gpu-rates.json`, else
//! `~/.config/causeway/gpu-rates.json`; a missing file is no error, a malformed one is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A rate and where it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Rate {
    /// US dollars per GPU-hour.
    pub dollars_per_gpu_hour: f64,
    /// `--gpu-rate`, the config file and its key, or the built-in table's source and date.
    pub source: String,
}

/// One row of the built-in table: a family, its rate, where the number comes from.
struct ListPrice {
    family: &'static str,
    dollars_per_gpu_hour: f64,
    source: &'static str,
}

/// List prices, on-demand, per GPU-hour: the instance's hourly price divided by its GPUs (the
/// instance's CPUs, memory and disk come with it: a single-GPU instance's rate is an upper bound of
/// the GPU's). All from AWS EC2 On-Demand, US East (N. Virginia), Linux, as listed on
/// <https://aws.amazon.com/ec2/pricing/on-demand/> in 2024 (before the GPU price cuts AWS announced
/// on 2025-06-05); written from that page, not re-checked by any build. A contract, a reserved or
/// spot price differs: give it with `--gpu-rate` or the config file.
///
/// No H200 row: no H200 list price per hour was published with the others (AWS's p5e/p5en were sold
/// through capacity blocks first); an H200 has "no rate" until the config file names one.
const LIST_PRICES: &[ListPrice] = &[
    // p5.48xlarge, 8 x H100 80GB SXM: $98.32/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "H100",
        dollars_per_gpu_hour: 12.29,
        source: "AWS p5.48xlarge on-demand us-east-1, 2024: $98.32/h / 8 GPUs",
    },
    // p4de.24xlarge, 8 x A100 80GB SXM: $40.96576/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "A100 80GB",
        dollars_per_gpu_hour: 5.12,
        source: "AWS p4de.24xlarge on-demand us-east-1, 2024: $40.97/h / 8 GPUs",
    },
    // p4d.24xlarge, 8 x A100 40GB SXM: $32.77264/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "A100 40GB",
        dollars_per_gpu_hour: 4.10,
        source: "AWS p4d.24xlarge on-demand us-east-1, 2024: $32.77/h / 8 GPUs",
    },
    // g6e.xlarge, 1 x L40S: $1.861/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "L40S",
        dollars_per_gpu_hour: 1.861,
        source: "AWS g6e.xlarge on-demand us-east-1, 2024: $1.861/h, 1 GPU",
    },
    // g5.xlarge, 1 x A10G: $1.006/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "A10G",
        dollars_per_gpu_hour: 1.006,
        source: "AWS g5.xlarge on-demand us-east-1, 2024: $1.006/h, 1 GPU",
    },
    // g6.xlarge, 1 x L4: $0.8048/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "L4",
        dollars_per_gpu_hour: 0.8048,
        source: "AWS g6.xlarge on-demand us-east-1, 2024: $0.8048/h, 1 GPU",
    },
    // g4dn.xlarge, 1 x T4: $0.526/h (AWS on-demand, us-east-1, 2024)
    ListPrice {
        family: "T4",
        dollars_per_gpu_hour: 0.526,
        source: "AWS g4dn.xlarge on-demand us-east-1, 2024: $0.526/h, 1 GPU",
    },
];

/// The family of an NVML device name, as the table and the config file key it: `NVIDIA H100 80GB
/// HBM3` -> `H100`, `NVIDIA A100-SXM4-80GB` -> `A100 80GB`, `Tesla T4` -> `T4`. An A100 whose name
/// gives no memory size is `A100` (two prices, no guess); a name of no known family is `None`.
pub fn family(name: &str) -> Option<&'static str> {
    let up = name.to_ascii_uppercase();
    let tokens: Vec<&str> = up.split(|c: char| !c.is_ascii_alphanumeric()).filter(|t| !t.is_empty()).collect();
    let has = |t: &str| tokens.contains(&t);
    let fam = if has("H200") {
        "H200"
    } else if has("H100") {
        "H100"
    } else if has("A100") {
        match () {
            _ if has("80GB") => "A100 80GB",
            _ if has("40GB") => "A100 40GB",
            _ => "A100",
        }
    } else if has("L40S") {
        "L40S"
    } else if has("L40") {
        "L40"
    } else if has("A10G") {
        "A10G"
    } else if has("A10") {
        "A10"
    } else if has("L4") {
        "L4"
    } else if has("T4") {
        "T4"
    } else {
        return None;
    };
    Some(fam)
}

/// The built-in list price of a family, if the table has one.
pub fn list_price(family: &str) -> Option<Rate> {
    LIST_PRICES.iter().find(|p| p.family == family).map(|p| Rate {
        dollars_per_gpu_hour: p.dollars_per_gpu_hour,
        source: format!("built-in list price: {}", p.source),
    })
}

/// Where rates come from: `--gpu-rate`, the config file, the built-in table.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    /// `--gpu-rate`: one rate for every GPU.
    pub override_rate: Option<f64>,
    /// The config file read, and its rates keyed by lower-case name or family.
    pub file: Option<(PathBuf, BTreeMap<String, f64>)>,
}

impl Rates {
    /// The built-in table only (no file, no flag).
    pub fn builtin() -> Rates {
        Rates::default()
    }

    /// `--gpu-rate` (if given) over the config file (if there is one) over the built-in table.
    pub fn load(override_rate: Option<f64>) -> Result<Rates, String> {
        let file = match config_path() {
            Some(p) if p.exists() => Some((p.clone(), read_file(&p)?)),
            _ => None,
        };
        Rates { override_rate, file }.checked()
    }

    /// Rates read from `path` (a test, or a path given explicitly).
    pub fn from_file(override_rate: Option<f64>, path: &Path) -> Result<Rates, String> {
        Rates { override_rate, file: Some((path.to_path_buf(), read_file(path)?)) }.checked()
    }

    fn checked(self) -> Result<Rates, String> {
        match self.override_rate {
            Some(r) if !(r.is_finite() && r >= 0.0) => Err(format!("--gpu-rate {r}: dollars per GPU-hour, 0 or more")),
            _ => Ok(self),
        }
    }

    /// The rate of a GPU model (its NVML name), or why there is none.
    pub fn rate_for(&self, model: Option<&str>) -> Result<Rate, String> {
        if let Some(r) = self.override_rate {
            return Ok(Rate { dollars_per_gpu_hour: r, source: "--gpu-rate".into() });
        }
        let Some(name) = model else {
            return Err("no rate: the trace names no GPU model (NVML was not read); give --gpu-rate".into());
        };
        let fam = family(name);
        if let Some((path, rates)) = &self.file {
            for key in std::iter::once(name.to_ascii_lowercase()).chain(fam.map(str::to_ascii_lowercase)) {
                if let Some(&r) = rates.get(&key) {
                    return Ok(Rate { dollars_per_gpu_hour: r, source: format!("{} ({key})", path.display()) });
                }
            }
        }
        fam.and_then(list_price).ok_or_else(|| {
            format!(
                "no rate for {name}: the built-in table has none{}; give --gpu-rate or add it to {}",
                if fam.is_none() { " (an unknown model)" } else { "" },
                config_path().map_or_else(|| "the config file".to_string(), |p| p.display().to_string())
            )
        })
    }
}

/// The config file's path (see the module doc).
pub fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAUSEWAY_GPU_RATES") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("causeway").join("gpu-rates.json"))
}

fn read_file(path: &Path) -> Result<BTreeMap<String, f64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let raw: BTreeMap<String, f64> = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: {e} (expected a JSON object of dollars per GPU-hour by GPU model, e.g. {{\"H200\": 3.5}})",
            path.display()
        )
    })?;
    for (k, v) in &raw {
        if !(v.is_finite() && *v >= 0.0) {
            return Err(format!("{}: {k}: {v} is no rate (dollars per GPU-hour, 0 or more)", path.display()));
        }
    }
    Ok(raw.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_names_fall_in_their_families() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", Some("H100")),
            ("NVIDIA H100 PCIe", Some("H100")),
            ("NVIDIA H200", Some("H200")),
            ("NVIDIA A100-SXM4-80GB", Some("A100 80GB")),
            ("NVIDIA A100-PCIE-40GB", Some("A100 40GB")),
            ("NVIDIA A100 80GB PCIe", Some("A100 80GB")),
            ("NVIDIA L40S", Some("L40S")),
            ("NVIDIA A10G", Some("A10G")),
            ("NVIDIA L4", Some("L4")),
            ("Tesla T4", Some("T4")),
            ("NVIDIA GeForce RTX 4090", None),
        ];
        for (name, fam) in cases {
            assert_eq!(family(name), fam, "{name}");
        }
    }

    #[test]
    fn the_override_wins_and_an_unknown_model_has_no_rate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu-rates.json");
        std::fs::write(&path, r#"{"h200": 3.5, "NVIDIA H100 80GB HBM3": 2.0}"#).unwrap();
        let file = Rates::from_file(None, &path).unwrap();
        assert_eq!(file.rate_for(Some("NVIDIA H200")).unwrap().dollars_per_gpu_hour, 3.5);
        // the full name before the family, the file before the table
        assert_eq!(file.rate_for(Some("NVIDIA H100 80GB HBM3")).unwrap().dollars_per_gpu_hour, 2.0);
        assert_eq!(file.rate_for(Some("NVIDIA H100 PCIe")).unwrap().dollars_per_gpu_hour, 12.29);
        let flag = Rates::from_file(Some(1.25), &path).unwrap();
        let r = flag.rate_for(Some("NVIDIA H200")).unwrap();
        assert_eq!((r.dollars_per_gpu_hour, r.source.as_str()), (1.25, "--gpu-rate"));
        let builtin = Rates::builtin();
        let none = builtin.rate_for(Some("NVIDIA GeForce RTX 4090")).unwrap_err();
        assert!(none.starts_with("no rate for NVIDIA GeForce RTX 4090"), "{none}");
        assert!(builtin.rate_for(Some("NVIDIA H200")).unwrap_err().starts_with("no rate"));
        assert!(builtin.rate_for(Some("NVIDIA A100-SXM4")).is_err(), "an A100 of no size is no guess");
        assert!(builtin.rate_for(None).unwrap_err().starts_with("no rate"));
        std::fs::write(&path, r#"{"h200": -1}"#).unwrap();
        assert!(Rates::from_file(None, &path).is_err());
        assert!(Rates { override_rate: Some(f64::NAN), file: None }.checked().is_err());
    }
}
