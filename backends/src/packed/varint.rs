//! Variable-length integers for the structures a finished trace packs into byte strings
//! ([`calls`](super::calls), [`durations`](super::durations)): LEB128, with
//! zigzag for signed values, so that the small differences those structures store take a byte or
//! two.

/// LEB128, 7 bits a byte, low bits first.
pub(crate) fn put_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag (small magnitudes of either sign in few bytes), then LEB128.
pub(crate) fn put_signed(out: &mut Vec<u8>, v: i64) {
    put_unsigned(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Reads what [`put_unsigned`] and [`put_signed`] wrote, refusing a cut or overlong integer.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn at_end(&self) -> bool {
        self.at == self.data.len()
    }

    #[inline]
    pub(crate) fn byte(&mut self) -> std::result::Result<u8, &'static str> {
        let b = *self.data.get(self.at).ok_or("cut short")?;
        self.at += 1;
        Ok(b)
    }

    #[inline]
    pub(crate) fn unsigned(&mut self) -> std::result::Result<u64, &'static str> {
        // most values the packed structures hold are differences below 128: one byte
        let b = self.byte()?;
        if b < 0x80 {
            return Ok(u64::from(b));
        }
        self.unsigned_from(b)
    }

    fn unsigned_from(&mut self, first: u8) -> std::result::Result<u64, &'static str> {
        let mut v = u64::from(first & 0x7f);
        let mut shift = 7;
        loop {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err("an integer longer than 64 bits");
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    #[inline]
    pub(crate) fn signed(&mut self) -> std::result::Result<i64, &'static str> {
        let u = self.unsigned()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_at_their_extremes() {
        let values = [0, 1, -1, 63, -64, 64, 127, 128, i64::from(u32::MAX), i64::MAX, i64::MIN, i64::MIN + 1];
        let mut data = Vec::new();
        for &v in &values {
            put_signed(&mut data, v);
            put_unsigned(&mut data, v as u64);
        }
        let mut r = Reader::new(&data);
        for &v in &values {
            assert_eq!(r.signed(), Ok(v));
            assert_eq!(r.unsigned(), Ok(v as u64));
        }
        assert_eq!(r.byte(), Err("cut short"));
        let mut r = Reader::new(&[0xff; 11]);
        assert_eq!(r.unsigned(), Err("an integer longer than 64 bits"));
    }
}
