//! The provider key each recorded step of a staged key sent to another system, as
//! `keys show` and the terminal UI's key detail show it: what an operator searches a
//! provider's dashboard with. Derived by the runtime's own
//! [`provider_key`] from the row's reservation and the
//! journal's step names, never written out a second time here.

use idem_runtime::staged::provider_key;
use idem_store::{Journal, KeyRow};
use serde_json::{Map, Value};

use crate::format::{sealed, unopened};

/// What a key's row and journal tell of the provider keys it sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderKeys {
    /// An atomic key (it has no reservation): it sends none.
    Atomic,
    /// A staged key whose journal is sealed under this storage key, which the tool was not
    /// given: its steps cannot be named, nor their provider keys derived.
    Sealed(String),
    /// A staged key's recorded steps, each with the provider key sent for it, in the
    /// journal's order; empty when no step is recorded yet.
    Steps(Vec<(String, String)>),
}

impl ProviderKeys {
    /// The provider keys of `row`, for the steps its `journal` records (`None`: no journal
    /// was read, as for a key with no step recorded).
    #[must_use]
    pub fn of(row: &KeyRow, journal: Option<&Journal>) -> Self {
        let Some(reservation) = row.reservation else {
            return Self::Atomic;
        };
        let steps = journal.map(|journal| &journal.steps);
        // A journal sealed under a key the tool lacks reads as no steps; steps that did read
        // (only the request was sealed so) are shown.
        if steps.is_none_or(Map::is_empty)
            && let Some(key) = unopened(journal.and_then(|journal| journal.sealed.as_ref()))
        {
            return Self::Sealed(key.to_owned());
        }
        let steps = steps.into_iter().flat_map(Map::keys);
        Self::Steps(
            steps
                .map(|step| {
                    let sent = provider_key(row.key_ref(), reservation, step);
                    (step.clone(), sent)
                })
                .collect(),
        )
    }

    /// `keys show --json`'s `provider_keys`: an object from step name to provider key for a
    /// staged key (empty when no step is recorded); `null` for an atomic key, and for a
    /// staged key whose steps are sealed ([`ProviderKeys::sealed_by`] says under which key).
    #[must_use]
    pub fn json(&self) -> Value {
        match self {
            Self::Atomic | Self::Sealed(_) => Value::Null,
            Self::Steps(steps) => Value::Object(
                steps
                    .iter()
                    .map(|(step, key)| (step.clone(), Value::String(key.clone())))
                    .collect(),
            ),
        }
    }

    /// The storage key the steps are sealed under when the tool was not given it
    /// (`provider_keys_sealed` in `keys show --json`).
    #[must_use]
    pub fn sealed_by(&self) -> Option<&str> {
        match self {
            Self::Sealed(key) => Some(key),
            Self::Atomic | Self::Steps(_) => None,
        }
    }

    /// What stands for the provider keys when there is no step to list: `none (no step
    /// recorded yet)`, `steps sealed (key k1)`; `None` for an atomic key, or when there are
    /// steps.
    #[must_use]
    pub fn instead(&self) -> Option<String> {
        match self {
            Self::Atomic => None,
            Self::Sealed(key) => Some(format!("steps {}", sealed(key))),
            Self::Steps(steps) if steps.is_empty() => Some(NONE_RECORDED.to_owned()),
            Self::Steps(_) => None,
        }
    }

    /// `keys show`'s `provider keys:` block, one `STEP: KEY` line a step, after a blank line;
    /// empty for an atomic key.
    #[must_use]
    pub fn text(&self) -> String {
        if *self == Self::Atomic {
            return String::new();
        }
        if let Some(instead) = self.instead() {
            return format!("\nprovider keys: {instead}\n");
        }
        let mut text = "\nprovider keys:\n".to_owned();
        for (step, key) in self.steps() {
            text.push_str(&format!("  {step}: {key}\n"));
        }
        text
    }

    /// The recorded steps and their provider keys; none for an atomic key or sealed steps.
    #[must_use]
    pub fn steps(&self) -> &[(String, String)] {
        match self {
            Self::Steps(steps) => steps,
            Self::Atomic | Self::Sealed(_) => &[],
        }
    }
}

/// A staged key's provider keys when no step is recorded yet.
pub const NONE_RECORDED: &str = "none (no step recorded yet)";

#[cfg(test)]
mod tests {
    use idem_store::{KeyRef, KeyStatus, Sealing};
    use serde_json::json;

    use super::*;

    fn row(reservation: Option<i64>) -> KeyRow {
        KeyRow {
            scope: "tenant:a".into(),
            operation: "pay:v1".into(),
            key: "k1".into(),
            status: KeyStatus::Stuck,
            fingerprint: vec![0; 32],
            response: None,
            sealed: None,
            created_at_ms: 0,
            completed_at_ms: None,
            expires_at_ms: 0,
            locked_until_ms: Some(0),
            attempt: 1,
            reservation,
            recovery_point: Some("charge".into()),
        }
    }

    fn journal(steps: Value, sealed: Option<Sealing>) -> Journal {
        Journal {
            recovery_point: Some("charge".into()),
            steps: steps.as_object().cloned().unwrap_or_default(),
            request: None,
            sealed,
        }
    }

    #[test]
    fn each_recorded_step_has_the_key_the_runtime_sends() {
        let key = KeyRef {
            scope: "tenant:a",
            operation: "pay:v1",
            key: "k1",
        };
        let recorded = journal(json!({"charge": "ch_1", "reserve": {"hold": 1}}), None);
        let keys = ProviderKeys::of(&row(Some(7)), Some(&recorded));
        let (charge, reserve) = (
            provider_key(key, 7, "charge"),
            provider_key(key, 7, "reserve"),
        );
        assert_eq!(keys.json(), json!({"charge": charge, "reserve": reserve}));
        assert_eq!(
            keys.text(),
            format!("\nprovider keys:\n  charge: {charge}\n  reserve: {reserve}\n")
        );
        assert_eq!((keys.sealed_by(), keys.instead()), (None, None));
        // A row reserved before reservations existed: the key its attempts sent.
        let legacy = ProviderKeys::of(&row(Some(0)), Some(&recorded));
        assert_eq!(
            legacy.json()["charge"],
            "idem_35afa7339cf564f691b21a71699f293d"
        );
    }

    #[test]
    fn atomic_keys_have_none_and_sealed_steps_are_said_to_be() {
        let none = journal(json!({}), None);
        let atomic = ProviderKeys::of(&row(None), Some(&none));
        assert_eq!(atomic, ProviderKeys::Atomic);
        assert_eq!((atomic.json(), atomic.text()), (Value::Null, String::new()));

        let unrecorded = ProviderKeys::of(&row(Some(7)), Some(&none));
        assert_eq!(unrecorded.json(), json!({}));
        assert_eq!(
            unrecorded.text(),
            "\nprovider keys: none (no step recorded yet)\n"
        );

        let sealing = |opened| {
            Some(Sealing {
                key: "k1".into(),
                opened,
            })
        };
        let unopened = journal(json!({}), sealing(false));
        let sealed = ProviderKeys::of(&row(Some(7)), Some(&unopened));
        assert_eq!(
            (sealed.json(), sealed.sealed_by()),
            (Value::Null, Some("k1"))
        );
        assert_eq!(sealed.text(), "\nprovider keys: steps sealed (key k1)\n");
        // Opened with the keys: the steps.
        let opened = journal(json!({"charge": "ch_1"}), sealing(true));
        let keys = ProviderKeys::of(&row(Some(7)), Some(&opened));
        assert_eq!(keys.steps().len(), 1);
    }
}
