//! [`KeyReused`]: what a server following idem's problems says when a key was used with
//! another request.

use serde::Deserialize;

/// A `422` whose problem type is [`KeyReused::TYPE`]: the key was already used with another
/// request, and nothing ran. The middleware never retries it (a bug to fix: a new request
/// needs a new key); this tells which fields of the request differ from the first one —
/// JSON pointers into the request such as `/body/amount`, never their values — when the
/// server names them (its `mismatch` member; empty lists when it does not).
///
/// ```
/// use idem_client::KeyReused;
///
/// let body = br#"{"type": "urn:idem:problem:key-reused", "title": "reused", "status": 422,
///     "mismatch": {"changed": ["/body/amount"], "added": [], "removed": ["/body/note"]}}"#;
/// let reused = KeyReused::from_problem(body).unwrap();
/// assert_eq!(reused.changed, ["/body/amount"]);
/// assert_eq!(reused.removed, ["/body/note"]);
/// assert!(KeyReused::from_problem(br#"{"type": "urn:idem:problem:in-flight"}"#).is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct KeyReused {
    /// Fields both requests have, with other values.
    #[serde(default)]
    pub changed: Vec<String>,
    /// Fields only this request has.
    #[serde(default)]
    pub added: Vec<String>,
    /// Fields only the first request had.
    #[serde(default)]
    pub removed: Vec<String>,
    /// How many names the server left out past its bound.
    #[serde(default)]
    pub omitted: usize,
}

#[derive(Deserialize)]
struct Problem {
    #[serde(rename = "type")]
    type_uri: String,
    #[serde(default)]
    mismatch: Option<KeyReused>,
}

impl KeyReused {
    /// The problem type of a reused key.
    pub const TYPE: &'static str = "urn:idem:problem:key-reused";

    /// Reads a problem body (`application/problem+json`, RFC 9457): `Some` when it is a
    /// reused key's, with the fields the server named; `None` for any other body.
    #[must_use]
    pub fn from_problem(body: &[u8]) -> Option<Self> {
        let problem: Problem = serde_json::from_slice(body).ok()?;
        (problem.type_uri == Self::TYPE).then(|| problem.mismatch.unwrap_or_default())
    }

    /// Whether the server named no field (it keeps no field digests for the key).
    #[must_use]
    pub fn names_nothing(&self) -> bool {
        self.changed.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_member_and_nothing_else() {
        let named = br#"{"type":"urn:idem:problem:key-reused","status":422,"mismatch":{"changed":[],"added":["/body/memo"],"removed":[],"omitted":3}}"#;
        let reused = KeyReused::from_problem(named).unwrap();
        assert_eq!(reused.added, ["/body/memo"]);
        assert_eq!(reused.omitted, 3);
        assert!(!reused.names_nothing());
        let bare = br#"{"type":"urn:idem:problem:key-reused","status":422}"#;
        assert!(KeyReused::from_problem(bare).unwrap().names_nothing());
        for other in [
            &br#"{"type":"urn:idem:problem:invalid-body"}"#[..],
            b"not json",
            b"",
        ] {
            assert_eq!(KeyReused::from_problem(other), None);
        }
    }
}
