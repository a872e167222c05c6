//! From two reads of requests to what a client reads in its own request: the rules of the
//! [module](super) — `null` as absent, arrays whose length changed, a value against objects
//! or arrays below it, maps named at their own pointer — then the bound on names.

use std::collections::BTreeSet;

use super::{MAX_REPORTED, Mismatch, Read};

/// The three lists being made, and the members left out of them for being `null` in one
/// request and absent in the other.
#[derive(Default)]
struct Lists {
    changed: BTreeSet<String>,
    added: BTreeSet<String>,
    removed: BTreeSet<String>,
    absent: Vec<(String, Which)>,
}

/// What a new request is compared as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compared {
    /// A whole request, written as the first was: its names are the operation's.
    Request,
    /// A body alone, read as JSON: only the names under `/body` that the first request had
    /// are the operation's, and only those are compared.
    BodyAsJson,
}

/// How `new` differs from `old`, at most [`MAX_REPORTED`] names.
pub(super) fn differences(old: &Read, new: &Read, as_: Compared) -> Mismatch {
    let compared = |name: &str| match as_ {
        Compared::Request => true,
        Compared::BodyAsJson => name == "/body" || name.starts_with("/body/"),
    };
    let mut lists = fields(old, new, &compared);
    arrays(old, new, &mut lists);
    values_over_containers(old, new, &mut lists);
    if lists.all().next().is_none() {
        // Nothing but `null`s against absent members (a body read as JSON can tell them
        // apart): named as they are rather than nothing named.
        for (name, which) in std::mem::take(&mut lists.absent) {
            lists.list(which).insert(name);
        }
    }
    absent_containers(old, new, as_, &mut lists);
    if as_ == Compared::BodyAsJson {
        unknown_members(old, &mut lists);
    }
    maps(old, new, &mut lists);
    for name in &lists.changed {
        lists.added.remove(name);
        lists.removed.remove(name);
    }
    bounded(lists)
}

/// Field by field: other digests are `changed`, but against a member's `null` (an absent
/// member, as a typed body writes it) `added` or `removed`; a member's `null` against
/// nothing is no difference.
fn fields(old: &Read, new: &Read, compared: &impl Fn(&str) -> bool) -> Lists {
    let mut lists = Lists::default();
    for (name, field) in &new.fields {
        let which = match old.fields.get(name) {
            Some(before) if before.digest == field.digest => continue,
            Some(before) if before.null => Which::Added,
            Some(_) if field.null => Which::Removed,
            Some(_) => Which::Changed,
            None if field.null => {
                lists.absent.push((name.clone(), Which::Added));
                continue;
            }
            None => Which::Added,
        };
        lists.list(which).insert(name.clone());
    }
    for (name, field) in &old.fields {
        if compared(name) && !new.fields.contains_key(name) {
            if field.null {
                lists.absent.push((name.clone(), Which::Removed));
            } else {
                lists.removed.insert(name.clone());
            }
        }
    }
    lists
}

/// An array whose length changed, or that is an object in the other request, is `changed`
/// at its pointer, with nothing below it named.
fn arrays(old: &Read, new: &Read, lists: &mut Lists) {
    let mut changed = Vec::new();
    for (array, length) in &old.arrays {
        match new.arrays.get(array) {
            Some(l) if l != length => changed.push(array),
            None if is_object(new, array) => changed.push(array),
            _ => {}
        }
    }
    // (Digests of the earlier formats keep no arrays.)
    for array in new.arrays.keys().filter(|_| old.shapes) {
        if !old.arrays.contains_key(array) && is_object(old, array) {
            changed.push(array);
        }
    }
    for array in changed {
        lists.drop_below(array);
        lists.added.remove(array);
        lists.removed.remove(array);
        lists.changed.insert(array.clone());
    }
}

/// Whether `read` has an object at `pointer` (not an array): fields below it, or an empty one.
fn is_object(read: &Read, pointer: &str) -> bool {
    !read.arrays.contains_key(pointer)
        && (has_below(read, pointer) || read.fields.get(pointer).is_some_and(|f| f.empty))
}

/// Whether `read` has fields strictly below `pointer`.
fn has_below(read: &Read, pointer: &str) -> bool {
    let below = format!("{pointer}/");
    read.fields
        .range(below.clone()..)
        .next()
        .is_some_and(|(name, _)| name.starts_with(&below))
}

/// A value in one request where the other has fields below its pointer is named once, at
/// its pointer: `removed` or `added` when it is `null`, `changed` otherwise. An empty object
/// is not named: the members the other has are.
fn values_over_containers(old: &Read, new: &Read, lists: &mut Lists) {
    let absent = lists.absent.iter().map(|(name, _)| name);
    let named: Vec<String> = lists.all().chain(absent).cloned().collect();
    for name in named {
        for (pointer, _) in ancestors(&name) {
            let (field, null_list) = match (new.fields.get(pointer), old.fields.get(pointer)) {
                (Some(field), _) => (field, Which::Removed),
                (None, Some(field)) => (field, Which::Added),
                (None, None) => continue,
            };
            let pointer = pointer.to_owned();
            lists.added.remove(&pointer);
            lists.removed.remove(&pointer);
            if field.empty {
                break;
            }
            lists.drop_below(&pointer);
            let which = if field.null {
                null_list
            } else {
                Which::Changed
            };
            lists.list(which).insert(pointer);
            break;
        }
    }
}

/// One of the three lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Changed,
    Added,
    Removed,
}

/// A field whose object or array the other request does not have at all is named by the
/// outermost such object or array: a member left out whole is one name. (A body compared
/// with a first request that had none — an input of `Idem::once` — keeps its fields' names.)
///
/// A member's `null` left out of the lists still tells that its object is there: an object
/// the other request does not have is named for it too.
fn absent_containers(old: &Read, new: &Read, as_: Compared, lists: &mut Lists) {
    for (which, other) in [(Which::Removed, new), (Which::Added, old)] {
        let mut names: Vec<(String, bool)> = Vec::new();
        names.extend(lists.list(which).iter().map(|name| (name.clone(), true)));
        let absent = lists.absent.iter().filter(|(_, w)| *w == which);
        names.extend(absent.map(|(name, _)| (name.clone(), false)));
        for (name, listed) in names {
            let outermost = ancestors(&name)
                .map(|(pointer, _)| pointer)
                .take_while(|pointer| !present(other, pointer))
                .filter(|pointer| as_ == Compared::Request || *pointer != "/body")
                .last();
            if let Some(pointer) = outermost {
                let list = lists.list(which);
                if listed {
                    list.remove(&name);
                }
                list.insert(pointer.to_owned());
            }
        }
    }
}

/// Whether `read` has anything at `pointer`: a field, fields below, an array.
fn present(read: &Read, pointer: &str) -> bool {
    read.fields.contains_key(pointer)
        || read.arrays.contains_key(pointer)
        || has_below(read, pointer)
}

/// A name the first request did not have, in a body read as JSON, may be one the client
/// made up: named by its nearest ancestor the first request had, as `changed`.
fn unknown_members(old: &Read, lists: &mut Lists) {
    let names: Vec<String> = lists.added.iter().cloned().collect();
    for name in names {
        if present(old, &name) {
            continue;
        }
        let known = ancestors(&name)
            .map(|(pointer, _)| pointer)
            .find(|pointer| present(old, pointer));
        if let Some(pointer) = known {
            lists.added.remove(&name);
            lists.changed.insert(pointer.to_owned());
        }
    }
}

/// A name at or below a map is named by the outermost map: `changed` when below it.
fn maps(old: &Read, new: &Read, lists: &mut Lists) {
    let outermost = |name: &str| {
        std::iter::once(name)
            .chain(ancestors(name).map(|(pointer, _)| pointer))
            .chain(std::iter::once("")) // the root
            .filter(|pointer| old.maps.contains(*pointer) || new.maps.contains(*pointer))
            .last()
            .map(str::to_owned)
    };
    let named: Vec<String> = lists.all().cloned().collect();
    for name in named {
        match outermost(&name) {
            Some(map) if map != name => {
                lists.drop_below(&map);
                lists.changed.insert(map);
            }
            _ => {}
        }
    }
}

/// The proper ancestors of the pointer `name`, nearest first: each with the rest of the name.
fn ancestors(name: &str) -> impl Iterator<Item = (&str, &str)> {
    name.char_indices()
        .rev()
        .filter(|&(at, c)| c == '/' && at > 0)
        .map(move |(at, _)| (&name[..at], &name[at..]))
}

impl Lists {
    fn list(&mut self, which: Which) -> &mut BTreeSet<String> {
        match which {
            Which::Changed => &mut self.changed,
            Which::Added => &mut self.added,
            Which::Removed => &mut self.removed,
        }
    }

    fn all(&self) -> impl Iterator<Item = &String> {
        self.changed
            .iter()
            .chain(self.added.iter())
            .chain(self.removed.iter())
    }

    /// Leaves out every name strictly below `pointer`.
    fn drop_below(&mut self, pointer: &str) {
        let below = |name: &String| {
            name.strip_prefix(pointer)
                .is_some_and(|rest| rest.starts_with('/'))
        };
        for list in [&mut self.changed, &mut self.added, &mut self.removed] {
            list.retain(|name| !below(name));
        }
    }
}

/// The lists, sorted, with at most [`MAX_REPORTED`] names over the three.
fn bounded(lists: Lists) -> Mismatch {
    let mut room = MAX_REPORTED;
    let mut omitted = 0;
    let mut keep = |list: BTreeSet<String>| {
        let kept = list.len().min(room);
        omitted += list.len() - kept;
        room -= kept;
        list.into_iter().take(kept).collect::<Vec<_>>()
    };
    let (changed, added, removed) = (keep(lists.changed), keep(lists.added), keep(lists.removed));
    Mismatch {
        changed,
        added,
        removed,
        omitted,
    }
}
