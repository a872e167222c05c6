//! Where a value's maps are: the JSON pointers of the outermost objects serde wrote as maps
//! (`serialize_map`). A map's member names are data — a client's, not names a type
//! declares — so what reports on a request names the map, never a member of it
//! ([`crate::fields`]). Structs and enum variants are objects whose names the program
//! declares; a struct with `#[serde(flatten)]` fields is written by serde as a map.

/// The pointer of the value being written, while no map encloses it, and the maps found.
#[derive(Debug, Default)]
pub(super) struct Maps {
    /// The JSON pointer of the current value (RFC 6901), from the root.
    pointer: String,
    /// How many maps enclose the current value: nothing below a map is tracked.
    inside: usize,
    /// The outermost maps, by pointer, in the order they were opened.
    pub(super) found: Vec<String>,
}

impl Maps {
    /// The length of the current pointer, to come back to.
    pub(super) fn mark(&self) -> usize {
        self.pointer.len()
    }

    /// Makes the current value the member or element `token` of the value at `base` (a
    /// [`Self::mark`]).
    pub(super) fn enter(&mut self, base: usize, token: &[u8]) {
        if self.inside > 0 {
            return;
        }
        self.pointer.truncate(base);
        self.pointer.push('/');
        for c in String::from_utf8_lossy(token).chars() {
            match c {
                '~' => self.pointer.push_str("~0"),
                '/' => self.pointer.push_str("~1"),
                c => self.pointer.push(c),
            }
        }
    }

    /// Makes the current value the element `index` of the array at `base`.
    pub(super) fn enter_index(&mut self, base: usize, index: usize) {
        if self.inside == 0 {
            self.pointer.truncate(base);
            self.pointer.push('/');
            self.pointer.push_str(&index.to_string());
        }
    }

    /// Comes back to the value at `mark`.
    pub(super) fn leave(&mut self, mark: usize) {
        if self.inside == 0 {
            self.pointer.truncate(mark);
        }
    }

    /// A map opens at the current value.
    pub(super) fn open_map(&mut self) {
        if self.inside == 0 {
            self.found.push(self.pointer.clone());
        }
        self.inside += 1;
    }

    /// The innermost open map closes.
    pub(super) fn close_map(&mut self) {
        self.inside = self.inside.saturating_sub(1);
    }
}
