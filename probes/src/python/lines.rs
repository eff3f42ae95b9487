//! Line numbers from a CPython code object's line table: the line being executed at an
//! instruction offset, as `PyCode_Addr2Line` computes it. Two formats: 3.10's `co_linetable`
//! (PEP 626: byte pairs of address delta and line delta) and 3.11+'s location table (PEP 657:
//! varint entries, `Objects/locations.md` in CPython). Tables are untrusted bytes read from a traced
//! process: a malformed or cut table gives `None`, never a panic.

/// The line of the instruction at `instr` (in code units) of a code object whose first line is
/// `first` and whose line table is `table`, for CPython 3.`minor`; `None` when the table has no
/// line there (or is cut before it, or the version's format is unknown).
pub fn line_at(minor: u8, table: &[u8], first: i32, instr: u32) -> Option<i32> {
    match minor {
        10 => line_at_310(table, first, instr as usize * 2),
        11.. => line_at_311(table, first, instr as usize),
        _ => None,
    }
}

/// 3.10: pairs of (address delta in bytes, signed line delta); -128: no line for the range.
fn line_at_310(table: &[u8], first: i32, addr: usize) -> Option<i32> {
    let mut line = first;
    let mut end = 0usize;
    for pair in table.chunks_exact(2) {
        let (start, delta) = (end, pair[1] as i8);
        end += pair[0] as usize;
        let this = if delta == -128 {
            None
        } else {
            line = line.checked_add(delta as i32)?;
            Some(line)
        };
        if start < end && addr < end {
            return this;
        }
    }
    None
}

/// 3.11+: entries of a start byte (bit 7 set; bits 3-6 the form; bits 0-2 the code units covered,
/// minus one) and the form's varints.
fn line_at_311(table: &[u8], first: i32, instr: usize) -> Option<i32> {
    let mut r = Table { bytes: table, at: 0 };
    let mut line = first;
    let mut units = 0usize;
    while r.at < table.len() {
        let head = r.byte()?;
        if head & 0x80 == 0 {
            return None;
        }
        let (form, len) = ((head >> 3) & 15, (head & 7) as usize + 1);
        let this = match form {
            15 => None,
            14 => {
                line = line.checked_add(r.svarint()?)?;
                r.varint()?; // end line delta
                r.varint()?; // column + 1
                r.varint()?; // end column + 1
                Some(line)
            }
            13 => {
                line = line.checked_add(r.svarint()?)?;
                Some(line)
            }
            10..=12 => {
                line = line.checked_add(form as i32 - 10)?;
                r.byte()?;
                r.byte()?;
                Some(line)
            }
            _ => {
                r.byte()?;
                Some(line)
            }
        };
        if instr < units + len {
            return this;
        }
        units += len;
    }
    None
}

struct Table<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Table<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// 6-bit chunks, least significant first; bit 6 says another chunk follows.
    fn varint(&mut self) -> Option<u32> {
        let mut b = self.byte()?;
        let mut v = (b & 63) as u32;
        let mut shift = 0;
        while b & 64 != 0 {
            b = self.byte()?;
            shift += 6;
            if shift > 30 {
                return None;
            }
            v |= ((b & 63) as u32) << shift;
        }
        Some(v)
    }

    fn svarint(&mut self) -> Option<i32> {
        let v = self.varint()?;
        Some(if v & 1 != 0 { -((v >> 1) as i32) } else { (v >> 1) as i32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every installed CPython 3.10+ dumps the line tables of real code (its own `dis` and
    /// `asyncio` modules plus a sample with a generator and a coroutine) and the line of every
    /// instruction as it computes it (`co_lines`); the decoder must give the same line everywhere.
    #[test]
    fn lines_match_every_installed_cpython() {
        let script = r#"
import dis, asyncio, sys, types
def sample(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
        else:
            total -= 1
    return total
def gen(k):
    yield k
    yield k + 1
async def coro(x):
    await asyncio.sleep(0)
    return x
def codes(mod):
    out = []
    for v in list(vars(mod).values()):
        if isinstance(v, types.FunctionType):
            out.append(v.__code__)
            out.extend(c for c in v.__code__.co_consts if isinstance(c, types.CodeType))
    return out
for co in codes(sys.modules[__name__]) + codes(dis) + codes(asyncio.base_events):
    lines = []
    for start, end, line in co.co_lines():
        for b in range(start, end, 2):
            lines.append("%d=%s" % (b // 2, "-" if line is None else line))
    print(co.co_firstlineno, co.co_linetable.hex(), ",".join(lines))
"#;
        let pythons = causeway_testdata::cpythons();
        assert!(!pythons.is_empty(), "no CPython 3.10+ on this machine (pyenv or /usr/bin)");
        for py in pythons {
            let out = std::process::Command::new(&py.path).arg("-c").arg(script).output().unwrap();
            assert!(out.status.success(), "{}: {}", py.path.display(), String::from_utf8_lossy(&out.stderr));
            let mut checked = 0;
            for row in String::from_utf8(out.stdout).unwrap().lines() {
                let mut it = row.split(' ');
                let first: i32 = it.next().unwrap().parse().unwrap();
                let hex = it.next().unwrap();
                let table: Vec<u8> =
                    (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
                for cell in it.next().unwrap_or("").split(',').filter(|c| !c.is_empty()) {
                    let (instr, want) = cell.split_once('=').unwrap();
                    let want = want.parse::<i32>().ok();
                    let got = line_at(py.minor, &table, first, instr.parse().unwrap());
                    assert_eq!(got, want, "CPython 3.{} instruction {instr} of a code at line {first}", py.minor);
                    checked += 1;
                }
            }
            assert!(checked > 1000, "3.{}: only {checked} instructions checked", py.minor);
        }
    }

    #[test]
    fn malformed_or_cut_tables_give_none() {
        assert_eq!(line_at(12, &[0x00, 0x01], 5, 0), None, "no start bit");
        assert_eq!(line_at(12, &[0xf0 | 0x8, 0xff], 5, 0), None, "a varint that runs off the end");
        assert_eq!(line_at(12, &[], 5, 0), None);
        assert_eq!(line_at(10, &[2, 1], 5, 3), None, "past the table");
        assert_eq!(line_at(10, &[2, 1], 5, 0), Some(6));
        assert_eq!(line_at(9, &[2, 1], 5, 0), None, "a format this build does not know");
        assert_eq!(line_at(11, &[0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f], 1, 0), None, "an endless varint");
    }
}
