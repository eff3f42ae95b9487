//! Symbol demangling, one definition for the stacks (analysis) and the kernel names (probes): C++
//! (Itanium: `_Z...`, what nvcc and every CUDA library emit) and Rust (legacy `_ZN...17h<hash>E` and
//! v0 `_R...`). Anything else comes back as it is.

fn is_rust_legacy(sym: &str) -> bool {
    // Rust legacy mangling ends with a 17h<16 hex>E hash segment.
    sym.len() > 20 && sym.ends_with('E') && {
        let tail = &sym[sym.len() - 20..sym.len() - 1];
        tail.starts_with("17h") && tail[3..].chars().all(|c| c.is_ascii_hexdigit())
    }
}

/// Demangle a C++ or Rust symbol; anything else comes back as it is.
pub fn demangle(sym: &str) -> String {
    if sym.starts_with("_R") || (sym.starts_with("_ZN") && is_rust_legacy(sym)) {
        if let Ok(d) = rustc_demangle::try_demangle(sym) {
            return format!("{d:#}");
        }
    }
    if sym.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(sym) {
            if let Ok(d) = s.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    sym.to_string()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cuda_kernel_names_demangle() {
        assert_eq!(demangle("_Z10vector_addPfS_S_i"), "vector_add(float*, float*, float*, int)");
        assert_eq!(demangle("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
        assert_eq!(demangle("_Znot a symbol"), "_Znot a symbol");
    }
}
