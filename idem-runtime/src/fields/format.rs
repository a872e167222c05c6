//! The stored form of [`FieldDigests`]: a version byte, the level, the salt, then each field;
//! from version 3, whether each value is `null`, the arrays' lengths and the maps.

use std::collections::{BTreeMap, BTreeSet};

use super::{DIGEST_LEN, Field, FieldDigests, Read, VERSION};

impl FieldDigests {
    /// As stored: a version byte, the level, the salt, the count (`u16`, little-endian),
    /// then each field's name length (`u16`), name and digest, and (version 3) a byte that is
    /// 1 for a member's `null`, 2 for an empty object, else 0; then (version 3) the count of arrays and each one's name length, name
    /// and length (`u32`), and the count of maps and each one's name length and name.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let read = &self.read;
        let names: usize = read.fields.keys().map(String::len).sum();
        let mut out = Vec::with_capacity(16 + names + read.fields.len() * (3 + DIGEST_LEN));
        out.push(self.version);
        out.push(self.depth);
        out.extend_from_slice(&self.salt);
        push_count(&mut out, read.fields.len());
        for (name, field) in &read.fields {
            push_name(&mut out, name);
            out.extend_from_slice(&field.digest);
            if self.version >= 3 {
                out.push(u8::from(field.null) | u8::from(field.empty) << 1);
            }
        }
        if self.version >= 3 {
            push_count(&mut out, read.arrays.len());
            for (name, length) in &read.arrays {
                push_name(&mut out, name);
                out.extend_from_slice(&length.to_le_bytes());
            }
            push_count(&mut out, read.maps.len());
            for name in &read.maps {
                push_name(&mut out, name);
            }
        }
        out
    }

    /// Reads [`Self::to_bytes`]; `None` for bytes it did not write.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (&version, rest) = bytes.split_first()?;
        if !(1..=VERSION).contains(&version) {
            return None;
        }
        let (&depth, rest) = rest.split_first()?;
        let (salt, mut rest) = rest.split_first_chunk::<8>()?;
        let mut read = Read::default();
        for _ in 0..take_count(&mut rest)? {
            let name = take_name(&mut rest)?;
            let (digest, after) = rest.split_first_chunk::<DIGEST_LEN>()?;
            rest = after;
            let (null, empty) = if version >= 3 {
                let (&flags, after) = rest.split_first()?;
                rest = after;
                match flags {
                    0 => (false, false),
                    1 => (true, false),
                    2 => (false, true),
                    _ => return None,
                }
            } else {
                (false, false)
            };
            let digest = *digest;
            read.fields.insert(
                name,
                Field {
                    digest,
                    null,
                    empty,
                },
            );
        }
        if version >= 3 {
            read.arrays = take_arrays(&mut rest)?;
            read.maps = take_maps(&mut rest)?;
            read.shapes = true;
        }
        rest.is_empty().then_some(Self {
            version,
            depth,
            salt: *salt,
            read,
        })
    }
}

fn push_count(out: &mut Vec<u8>, count: usize) {
    out.extend_from_slice(&u16::try_from(count).unwrap_or(u16::MAX).to_le_bytes());
}

fn push_name(out: &mut Vec<u8>, name: &str) {
    push_count(out, name.len());
    out.extend_from_slice(name.as_bytes());
}

fn take_count(rest: &mut &[u8]) -> Option<u16> {
    let (count, after) = rest.split_first_chunk::<2>()?;
    *rest = after;
    Some(u16::from_le_bytes(*count))
}

fn take_name(rest: &mut &[u8]) -> Option<String> {
    let len = usize::from(take_count(rest)?);
    let name = std::str::from_utf8(rest.get(..len)?).ok()?.to_owned();
    *rest = rest.get(len..)?;
    Some(name)
}

fn take_arrays(rest: &mut &[u8]) -> Option<BTreeMap<String, u32>> {
    let mut arrays = BTreeMap::new();
    for _ in 0..take_count(rest)? {
        let name = take_name(rest)?;
        let (length, after) = rest.split_first_chunk::<4>()?;
        *rest = after;
        arrays.insert(name, u32::from_le_bytes(*length));
    }
    Some(arrays)
}

fn take_maps(rest: &mut &[u8]) -> Option<BTreeSet<String>> {
    let mut maps = BTreeSet::new();
    for _ in 0..take_count(rest)? {
        maps.insert(take_name(rest)?);
    }
    Some(maps)
}
