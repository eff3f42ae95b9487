//! ELF symbol tables: where a symbol lives in a library file (for attaching uprobes by name, versioned
//! symbols like `cudaMalloc@@libcudart.so.12` included), and which function an address of a running
//! process falls in (for kernel function pointers and user stacks), through `/proc/PID/maps`.
//!
//! Files are read through a cache of the byte ranges parsed (headers, symbol and string tables), not
//! whole: an executable that links the CUDA runtime statically also carries its GPU code, often
//! hundreds of MB, that symbol lookups never need. `.symtab` counts as much as `.dynsym`: a runtime
//! linked statically (nvcc's default) has `cudaLaunchKernel` only as a LOCAL `.symtab` symbol.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::read::ReadCache;
use object::{Object, ObjectSegment, ObjectSymbol, ReadRef, SymbolKind};

/// The loadable segments of an ELF file, to turn a virtual address into a file offset and back.
#[derive(Debug, Default, Clone)]
pub struct Segments(Vec<(u64, u64, u64)>); // (file offset, virtual address, file size)

impl Segments {
    pub fn of<'d, R: ReadRef<'d>>(file: &object::File<'d, R>) -> Segments {
        Segments(
            file.segments()
                .map(|s| {
                    let (off, size) = s.file_range();
                    (off, s.address(), size)
                })
                .collect(),
        )
    }

    /// The file offset of virtual address `vaddr` (through the segment whose file part holds it).
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.0.iter().find(|(_, va, sz)| vaddr >= *va && vaddr < va + sz).map(|(off, va, _)| vaddr - va + off)
    }

    /// The virtual address of file offset `off`.
    pub fn vaddr(&self, off: u64) -> Option<u64> {
        self.0.iter().find(|(o, _, sz)| off >= *o && off < o + sz).map(|(o, va, _)| off - o + va)
    }
}

/// The address of a symbol of any kind (data included), by name, from `.dynsym` or `.symtab`
/// (versioned `name@VERSION` spellings match their name).
pub fn symbol_address<'d, R: ReadRef<'d>>(file: &object::File<'d, R>, name: &str) -> Option<u64> {
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.name().is_ok_and(|n| n.split('@').next() == Some(name)) && s.address() != 0)
        .map(|s| s.address())
}

/// The function symbols of one ELF file, sorted by address, with its loadable segments.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    /// (virtual address, size, name), sorted by address.
    syms: Vec<(u64, u64, String)>,
    /// name -> file offset, for attaching.
    offsets: HashMap<String, u64>,
    segments: Segments,
}

impl ElfSymbols {
    pub fn load(path: &Path) -> anyhow::Result<ElfSymbols> {
        let cache = ReadCache::new(std::fs::File::open(path)?);
        let file = object::File::parse(&cache)?;
        let segments = Segments::of(&file);
        let mut syms = Vec::new();
        // name -> (file offset, from a LOCAL symbol)
        let mut offsets: HashMap<String, (u64, bool)> = HashMap::new();
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if !is_function_definition(&sym) {
                continue;
            }
            let Ok(raw) = sym.name() else { continue };
            // `.symtab` of some toolchains spells versioned names `name@@VERSION`
            let name = raw.split('@').next().unwrap_or(raw);
            if name.is_empty() {
                continue;
            }
            let addr = sym.address();
            if let Some(off) = segments.file_offset(addr) {
                // the first definition wins, except that a global one beats a local one: `.symtab`
                // lists the locals first, and a `static` helper of one file may share a name with
                // the exported function
                let local = !sym.is_global();
                match offsets.get(name) {
                    Some(&(_, was_local)) if !was_local || local => {}
                    _ => {
                        offsets.insert(name.to_string(), (off, local));
                    }
                }
            }
            syms.push((addr, sym.size(), name.to_string()));
        }
        syms.sort();
        syms.dedup_by(|a, b| a.0 == b.0);
        Ok(ElfSymbols { syms, offsets: offsets.into_iter().map(|(k, (off, _))| (k, off)).collect(), segments })
    }

    /// File offset of a function symbol (what a uprobe attaches at).
    pub fn offset_of(&self, name: &str) -> Option<u64> {
        self.offsets.get(name).copied()
    }

    pub fn has(&self, name: &str) -> bool {
        self.offsets.contains_key(name)
    }

    /// The function containing virtual address `vaddr`, and the offset into it.
    pub fn lookup_vaddr(&self, vaddr: u64) -> Option<(&str, u64)> {
        let i = self.syms.partition_point(|s| s.0 <= vaddr);
        let (addr, size, name) = self.syms.get(i.checked_sub(1)?)?;
        if *size == 0 && vaddr != *addr || *size > 0 && vaddr >= addr + size {
            return None;
        }
        Some((name.as_str(), vaddr - addr))
    }

    /// Virtual address of a file offset (through the segment that maps it).
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.segments.vaddr(off)
    }
}

/// A function defined in the file itself (not an import), at a real address.
fn is_function_definition<'d, S: ObjectSymbol<'d>>(sym: &S) -> bool {
    sym.kind() == SymbolKind::Text && sym.address() != 0 && sym.is_definition()
}

/// Which of `wanted` the file defines as functions, in `.dynsym` or `.symtab`, LOCAL ones included.
pub(crate) fn defined_in<'d, R: ReadRef<'d>>(file: &object::File<'d, R>, wanted: &[&str]) -> Vec<String> {
    let mut found: Vec<String> = file
        .dynamic_symbols()
        .chain(file.symbols())
        .filter(is_function_definition)
        .filter_map(|s| {
            let raw = s.name().ok()?;
            let name = raw.split('@').next().unwrap_or(raw);
            wanted.contains(&name).then(|| name.to_string())
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Which of the functions `wanted` the ELF file at `path` defines (`.dynsym` or `.symtab`, LOCAL
/// ones included), sorted. Errors for a file that cannot be read or is not an object file.
pub fn defined_functions(path: &Path, wanted: &[&str]) -> anyhow::Result<Vec<String>> {
    let cache = ReadCache::new(std::fs::File::open(path)?);
    let file = object::File::parse(&cache)?;
    Ok(defined_in(&file, wanted))
}

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: PathBuf,
}

/// The file-backed executable mappings of a process (`/proc/PID/maps`).
pub fn read_maps(pid: u32) -> std::io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(&text))
}

pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(_inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path: String = it.collect::<Vec<_>>().join(" ");
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) =
            (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        out.push(Mapping { start, end, offset, path: PathBuf::from(path.trim_end_matches(" (deleted)")) });
    }
    out
}

/// Resolves addresses of traced processes to `function+0xoff` and the file they are in. Keeps the
/// last maps seen for each pid, so addresses of a process that already exited still resolve.
#[derive(Default)]
pub struct Symbolizer {
    maps: HashMap<u32, Vec<Mapping>>,
    files: HashMap<PathBuf, Option<Arc<ElfSymbols>>>,
}

/// One resolved address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub symbol: Option<String>,
    pub offset: u64,
    pub file: String,
}

impl Symbolizer {
    /// Refresh the maps of `pid` (call while it is alive); returns whether they could be read.
    pub fn refresh(&mut self, pid: u32) -> bool {
        match read_maps(pid) {
            Ok(m) if !m.is_empty() => {
                self.maps.insert(pid, m);
                true
            }
            _ => false,
        }
    }

    /// Use maps read elsewhere (the ring reader snapshots them while the process is alive).
    pub fn set_maps(&mut self, pid: u32, maps: Vec<Mapping>) {
        if !maps.is_empty() {
            self.maps.insert(pid, maps);
        }
    }

    pub fn resolve(&mut self, pid: u32, addr: u64) -> Option<Resolved> {
        let find = |maps: &HashMap<u32, Vec<Mapping>>| {
            maps.get(&pid)?.iter().find(|m| addr >= m.start && addr < m.end).cloned()
        };
        let m = match find(&self.maps) {
            Some(m) => m,
            None => {
                // maps change (exec, dlopen): re-read once while the process lives
                self.refresh(pid);
                find(&self.maps)?
            }
        };
        let file_off = addr - m.start + m.offset;
        let elf =
            self.files.entry(m.path.clone()).or_insert_with(|| ElfSymbols::load(&m.path).ok().map(Arc::new)).clone();
        let file = m.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let hit = elf.as_ref().and_then(|e| e.vaddr_of_offset(file_off)).and_then(|va| {
            let e = elf.as_ref()?;
            e.lookup_vaddr(va).map(|(n, o)| (n.to_string(), o))
        });
        Some(match hit {
            Some((name, off)) => Resolved { symbol: Some(name), offset: off, file },
            None => Resolved { symbol: None, offset: file_off, file },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_only_executable_file_mappings() {
        let text = "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/x\n\
                    55d0c0001000-55d0c0002000 r-xp 00001000 08:01 123 /usr/bin/x\n\
                    7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [vdso]\n\
                    7f0000002000-7f0000003000 r-xp 00002000 08:01 9 /lib/lib cuda.so (deleted)\n";
        let m = parse_maps(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x55d0c0001000);
        assert_eq!(m[0].offset, 0x1000);
        assert_eq!(m[1].path, PathBuf::from("/lib/lib cuda.so"));
    }

    #[test]
    fn own_executable_symbols_resolve() {
        let me = std::env::current_exe().unwrap();
        let syms = ElfSymbols::load(&me).unwrap();
        assert!(!syms.syms.is_empty());
        // our own process: resolve the address of a function we can name
        let mut s = Symbolizer::default();
        let addr = parse_maps as *const () as usize as u64;
        let r = s.resolve(std::process::id(), addr).expect("address is mapped");
        assert!(r.symbol.as_deref().unwrap_or("").contains("parse_maps"), "{r:?}");
    }

    /// A runtime linked statically has its API functions as LOCAL `.symtab` symbols. The program
    /// prints the run-time addresses of its functions; through its maps they give the file offsets
    /// a uprobe needs, which `offset_of` must match.
    #[test]
    fn local_symbols_of_an_executable_resolve_to_the_right_offsets() {
        use crate::discovery::testutil::{compile_many, LoadedChild};
        let main = r#"
#include <stdio.h>
#include <unistd.h>
static __attribute__((noinline, used)) int cudaLaunchKernel(const void *f) { return f != 0; }
int __attribute__((noinline)) cudaMalloc(void **p, unsigned long n) { *p = 0; return (int)n; }
void *local_malloc_addr(void);
int main(int argc, char **argv) {
    printf("ok %d %lx %lx %lx\n", (int)getpid(), (unsigned long)&cudaLaunchKernel,
           (unsigned long)&cudaMalloc, (unsigned long)local_malloc_addr());
    fflush(stdout);
    if (argc > 1) sleep(30);
    return cudaLaunchKernel(argv);
}
"#;
        // a `static` function of another file with the exported function's name
        let other = "static __attribute__((noinline, used)) int cudaMalloc(void **p) { *p = 0; return 1; }\n\
                     void *local_malloc_addr(void) { return (void *)&cudaMalloc; }\n";
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("static-runtime-like");
        compile_many(&[main, other], &exe, &["-O0"]);
        let stripped = d.path().join("static-runtime-like-stripped");
        compile_many(&[main, other], &stripped, &["-O0", "-s"]);

        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("wait");
        let child = LoadedChild::spawn(cmd);
        let maps = read_maps(child.pid()).unwrap();
        let file_off = |hex: &str| {
            let addr = u64::from_str_radix(hex, 16).unwrap();
            let m = maps.iter().find(|m| addr >= m.start && addr < m.end).expect("mapped");
            assert!(m.path.ends_with("static-runtime-like"), "{m:?}");
            addr - m.start + m.offset
        };
        let [launch, malloc, local_malloc] = [0, 1, 2].map(|i| file_off(&child.extra[i]));
        let syms = ElfSymbols::load(&exe).unwrap();
        assert_eq!(syms.offset_of("cudaLaunchKernel"), Some(launch), "the local function");
        assert_eq!(syms.offset_of("cudaMalloc"), Some(malloc), "the global one, not the local one");
        assert_ne!(malloc, local_malloc);
        assert_eq!(
            defined_functions(&exe, &["cudaLaunchKernel", "cudaMalloc", "cuInit"]).unwrap(),
            vec!["cudaLaunchKernel".to_string(), "cudaMalloc".to_string()]
        );

        let s = ElfSymbols::load(&stripped).unwrap();
        assert_eq!(s.offset_of("cudaLaunchKernel"), None);
        assert_eq!(s.offset_of("cudaMalloc"), None);
        assert!(defined_functions(&stripped, &["cudaLaunchKernel", "cudaMalloc"]).unwrap().is_empty());
    }
}
