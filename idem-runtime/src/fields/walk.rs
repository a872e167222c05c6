//! The reader of a canonical request: each field's digest (or, with a [`Shape`], only how
//! many fields each level holds), the arrays' lengths, and the maps noted after it.

use std::collections::BTreeSet;
use std::hash::Hasher as _;

use sha2::{Digest, Sha256};
use siphasher::sip::SipHasher13;

use super::{DIGEST_LEN, Field, MAX_FIELDS, MAX_NAME_LEN, NotCanonical, Read};

/// SipHash's second key word: the salt is the first.
const SIP_K1: u64 = u64::from_le_bytes(*b"idem-fd2");

/// The longest canonical request read in one pass: too short to hold more than
/// [`MAX_FIELDS`] fields, names longer than [`MAX_NAME_LEN`] or more than [`MAX_DEPTH`]
/// levels, it is never cut, so the pass that chooses the level is skipped.
pub(super) const NEVER_CUT: usize = 64;

/// The deepest level a request is read to.
pub(super) const MAX_DEPTH: u8 = 32;

/// What each level of a request holds: per level, the fields that end there (values that
/// are not objects or arrays, and empty ones), the objects and arrays with something in them,
/// and the longest name of each.
pub(super) struct Shape {
    ends: [usize; MAX_DEPTH as usize + 1],
    ends_name: [usize; MAX_DEPTH as usize + 1],
    containers: [usize; MAX_DEPTH as usize + 1],
    containers_name: [usize; MAX_DEPTH as usize + 1],
}

impl Default for Shape {
    fn default() -> Self {
        let zero = [0; MAX_DEPTH as usize + 1];
        Self {
            ends: zero,
            ends_name: zero,
            containers: zero,
            containers_name: zero,
        }
    }
}

impl Shape {
    /// The deepest level whose fields fit [`MAX_FIELDS`] and [`MAX_NAME_LEN`];
    /// [`MAX_DEPTH`] when every field does.
    pub(super) fn depth(&self) -> u8 {
        let (mut fields, mut longest) = (0, 0);
        let mut chosen = 1;
        for level in 1..=MAX_DEPTH {
            let l = usize::from(level);
            fields += self.ends[l];
            longest = longest.max(self.ends_name[l]);
            let kept = fields + self.containers[l];
            let name = longest.max(self.containers_name[l]);
            if kept > MAX_FIELDS || name > MAX_NAME_LEN {
                break;
            }
            chosen = level;
            if self.containers[l] == 0 {
                // Nothing deeper: every field is kept.
                return MAX_DEPTH;
            }
        }
        chosen
    }
}

/// The fields of `canonical` cut at `depth`, each with its digest; its arrays and maps.
/// `maps` are maps besides those noted after it (the first request's, for another).
pub(super) fn read(
    canonical: &[u8],
    depth: u8,
    version: u8,
    salt: &[u8; 8],
    maps: &BTreeSet<String>,
) -> Result<Read, NotCanonical> {
    let mut walk = Walk::new(canonical, depth, version, salt, None);
    walk.request(maps)?;
    Ok(walk.read)
}

/// A reader of canonical JSON that records each field's digest, or with a [`Shape`], only
/// counts them.
pub(super) struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    cut: u8,
    /// How digests are made (see [`super::VERSION`]).
    version: u8,
    salt: &'a [u8; 8],
    /// The JSON pointer of the value being read.
    name: String,
    read: Read,
    shape: Option<&'a mut Shape>,
    /// Whether the value being read is an object's member (not an array's element): only a
    /// member can be absent, so only a member's `null` is kept as one.
    member: bool,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        bytes: &'a [u8],
        cut: u8,
        version: u8,
        salt: &'a [u8; 8],
        shape: Option<&'a mut Shape>,
    ) -> Self {
        Self {
            version,
            bytes,
            at: 0,
            cut,
            salt,
            name: String::new(),
            read: Read {
                shapes: true,
                ..Read::default()
            },
            shape,
            member: false,
        }
    }

    /// Reads the whole request: first the maps noted after it ([`super::note_maps`]), to
    /// which `maps` adds, then its value, where each map is one field.
    pub(super) fn request(&mut self, maps: &BTreeSet<String>) -> Result<(), NotCanonical> {
        // A line feed is never in canonical JSON: the first one starts the note.
        let end = self.bytes.iter().position(|&b| b == b'\n');
        if let Some(end) = end {
            self.at = end + 1;
            self.maps()?;
            self.end()?;
            (self.bytes, self.at) = (&self.bytes[..end], 0);
        }
        self.read.maps.extend(maps.iter().cloned());
        self.value(0)?;
        self.end()
    }

    /// Reads the note of the maps: a JSON array of strings.
    fn maps(&mut self) -> Result<(), NotCanonical> {
        self.expect(b'[')?;
        loop {
            let map = self.string()?;
            self.read.maps.insert(map);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(NotCanonical(self.at)),
            }
        }
    }

    /// Whether everything was read.
    fn end(&self) -> Result<(), NotCanonical> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(NotCanonical(self.at))
        }
    }

    fn peek(&self) -> Result<u8, NotCanonical> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or(NotCanonical(self.at))
    }

    fn expect(&mut self, byte: u8) -> Result<(), NotCanonical> {
        if self.peek()? != byte {
            return Err(NotCanonical(self.at));
        }
        self.at += 1;
        Ok(())
    }

    /// Reads the value at `self.at`, `level` deep (the root is 0).
    fn value(&mut self, level: u8) -> Result<(), NotCanonical> {
        let start = self.at;
        let open = self.peek()?;
        let container = open == b'{' || open == b'[';
        // A map is one field: its members' names are the client's.
        let map = container && self.read.maps.contains(&self.name);
        if !container || level >= self.cut || map {
            self.skip()?;
            // The root is not a field of its own, a request being an object, unless it is a
            // map.
            if level > 0 || map {
                self.record(start, level);
            }
            return Ok(());
        }
        self.at += 1;
        let close = if open == b'{' { b'}' } else { b']' };
        if self.peek()? == close {
            self.at += 1;
            if level > 0 {
                self.record(start, level);
                self.array_read(open, 0);
            }
            return Ok(());
        }
        if level > 0
            && let Some(shape) = &mut self.shape
        {
            let l = usize::from(level);
            shape.containers[l] += 1;
            shape.containers_name[l] = shape.containers_name[l].max(self.name.len());
        }
        let mut index = 0usize;
        loop {
            let length = self.name.len();
            self.name.push('/');
            if open == b'{' {
                let key = self.string()?;
                push_pointer_token(&mut self.name, &key);
                self.expect(b':')?;
            } else {
                self.name.push_str(&index.to_string());
                index += 1;
            }
            self.member = open == b'{';
            self.value(level + 1)?;
            self.name.truncate(length);
            match self.peek()? {
                b',' => self.at += 1,
                byte if byte == close => {
                    self.at += 1;
                    if level > 0 {
                        self.array_read(open, index);
                    }
                    return Ok(());
                }
                _ => return Err(NotCanonical(self.at)),
            }
        }
    }

    /// Records the length of the array just read, if it was one (`open` is `[`).
    fn array_read(&mut self, open: u8, length: usize) {
        if open == b'[' && self.shape.is_none() {
            let length = u32::try_from(length).unwrap_or(u32::MAX);
            self.read.arrays.insert(self.name.clone(), length);
        }
    }

    /// Records the value `start..self.at` under the current name.
    fn record(&mut self, start: usize, level: u8) {
        if let Some(shape) = &mut self.shape {
            // (Counting: every value recorded is a field that ends at its level.)
            let level = usize::from(level.min(MAX_DEPTH));
            shape.ends[level] += 1;
            shape.ends_name[level] = shape.ends_name[level].max(self.name.len());
            return;
        }
        let name_len = (self.name.len() as u64).to_le_bytes();
        let value = &self.bytes[start..self.at];
        let mut short = [0; DIGEST_LEN];
        if self.version == 1 {
            let mut hash = Sha256::new();
            hash.update(self.salt);
            hash.update(name_len);
            hash.update(self.name.as_bytes());
            hash.update(value);
            short.copy_from_slice(&hash.finalize()[..DIGEST_LEN]);
        } else {
            let mut hash = SipHasher13::new_with_keys(u64::from_le_bytes(*self.salt), SIP_K1);
            hash.write(&name_len);
            hash.write(self.name.as_bytes());
            hash.write(value);
            short.copy_from_slice(&hash.finish().to_le_bytes()[..DIGEST_LEN]);
        }
        let field = Field {
            digest: short,
            null: self.member && value == b"null",
            empty: value == b"{}",
        };
        self.read.fields.insert(self.name.clone(), field);
    }

    /// Moves past the value at `self.at`.
    fn skip(&mut self) -> Result<(), NotCanonical> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1).ok_or(NotCanonical(self.at))?;
                    self.at += 1;
                }
                b',' | b':' if depth > 0 => self.at += 1,
                _ => {
                    // A number, `true`, `false` or `null`: up to the next delimiter.
                    let rest = &self.bytes[self.at..];
                    let len = rest
                        .iter()
                        .position(|b| matches!(b, b',' | b':' | b'}' | b']'))
                        .unwrap_or(rest.len());
                    if len == 0 {
                        return Err(NotCanonical(self.at));
                    }
                    self.at += len;
                }
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }

    /// Reads a string literal, unescaped.
    fn string(&mut self) -> Result<String, NotCanonical> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let byte = self.peek()?;
            self.at += 1;
            match byte {
                b'"' => return String::from_utf8(out).map_err(|_| NotCanonical(self.at)),
                b'\\' => {
                    let escaped = self.peek()?;
                    self.at += 1;
                    match escaped {
                        b'"' | b'\\' | b'/' => out.push(escaped),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let hex = self
                                .bytes
                                .get(self.at..self.at + 4)
                                .and_then(|hex| std::str::from_utf8(hex).ok())
                                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                                .and_then(char::from_u32)
                                .ok_or(NotCanonical(self.at))?;
                            self.at += 4;
                            let mut buffer = [0; 4];
                            out.extend_from_slice(hex.encode_utf8(&mut buffer).as_bytes());
                        }
                        _ => return Err(NotCanonical(self.at)),
                    }
                }
                _ => out.push(byte),
            }
        }
    }
}

/// Appends `key` as a JSON pointer token (RFC 6901: `~` as `~0`, `/` as `~1`).
fn push_pointer_token(name: &mut String, key: &str) {
    for c in key.chars() {
        match c {
            '~' => name.push_str("~0"),
            '/' => name.push_str("~1"),
            c => name.push(c),
        }
    }
}
