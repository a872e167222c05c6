//! The store's refusals in the tool's words: the one place that says, for the command line
//! and the terminal UI alike, why an action does not apply ([`NotApplicable`]) or could do
//! harm ([`Hazard`]), with the times they carry written as times ([`rfc3339`]).

use idem_store::{Hazard, NotApplicable, StoreError};

use crate::format::rfc3339;

/// Where an action the store refuses unless forced can be forced from: the refusal's last
/// words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forcing {
    /// This command: `--force` on it.
    Flag,
    /// The command line, from a surface that never forces (the terminal UI).
    CommandLine,
}

/// Why an action does not apply: `refused: not applicable: expire: the key expired already
/// (at 2026-12-04T20:19:25.427Z)`.
pub fn not_applicable(why: &NotApplicable) -> String {
    let reason = match why {
        NotApplicable::ExpiredAlready { expired_at_ms } => format!(
            "expire: the key expired already (at {})",
            rfc3339(*expired_at_ms)
        ),
        NotApplicable::InFlight {
            id,
            locked_until_ms,
        } => format!(
            "retry: outbox message {id} is being delivered (a dispatcher holds it until {}); \
             wait for the outcome",
            rfc3339(*locked_until_ms)
        ),
        // No time in the others: the store's words.
        other => other.to_string(),
    };
    format!("refused: not applicable: {reason}")
}

/// Why an action is refused unless forced, what to do instead, and how to force it:
/// `refused: release: the key's lease is live until 2027-01-15T08:00:30.000Z: …`.
pub fn needs_force(action: &str, hazard: &Hazard, forcing: Forcing) -> String {
    format!(
        "refused: {action}: {}; {}",
        hazard_text(hazard),
        force_text(action, hazard, forcing)
    )
}

/// What the terminal UI's dialog says before `y` of an action the store will refuse unless
/// forced: the refusal's words ([`needs_force`]), as a warning.
pub fn warning(action: &str, hazard: &Hazard) -> String {
    format!(
        "the store refuses to {action} it unless forced: {}; {}",
        hazard_text(hazard),
        force_text(action, hazard, Forcing::CommandLine)
    )
}

/// How to force `action` over `hazard` from `forcing`: a refusal's last words.
fn force_text(action: &str, hazard: &Hazard, forcing: Forcing) -> String {
    match forcing {
        Forcing::Flag => format!(
            "or pass --force to {action} it now{} (recorded as forced in the audit trail)",
            match hazard {
                Hazard::LeaseLive { .. } => ", fencing the attempt out: it can commit nothing more",
                _ => "",
            }
        ),
        Forcing::CommandLine => {
            format!(
                "or force it (fenced, audited) on the command line: idem keys {action} … --force"
            )
        }
    }
}

/// What a [`Hazard`] is, and what to do instead of forcing: the words of a refusal and of
/// the terminal UI's warning before one.
pub fn hazard_text(hazard: &Hazard) -> String {
    match hazard {
        Hazard::LeaseLive { locked_until_ms } => {
            let until = locked_until_ms.map_or_else(
                || "with no end (a processing row without a lease)".to_owned(),
                |ms| format!("until {}", rfc3339(ms)),
            );
            format!(
                "the key's lease is live {until}: an attempt is running, and its work goes on \
                 whatever is done to the key; wait until the lease runs out (the key is stuck \
                 then)"
            )
        }
        Hazard::EffectsExist {
            attempt,
            recovery_point,
        } => {
            let point = recovery_point
                .as_ref()
                .map_or_else(String::new, |step| format!(", recovery point {step:?}"));
            format!(
                "the key completed in staged mode (attempt {attempt}{point}): its steps' \
                 effects exist, and a new execution of the key would run them again; retries \
                 replay its response, a client that needs a new execution sends a new key"
            )
        }
        // A hazard this version does not know: the store's words.
        other => other.to_string(),
    }
}

/// A store error in the tool's words: a refusal as [`not_applicable`] or [`needs_force`]
/// (forced from `forcing`) say it, anything else as the store does.
pub fn store_message(error: &StoreError, forcing: Forcing) -> String {
    match error {
        StoreError::NotApplicable(why) => not_applicable(why),
        StoreError::NeedsForce { action, hazard } => needs_force(action, hazard, forcing),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_give_times() {
        assert_eq!(
            not_applicable(&NotApplicable::ExpiredAlready {
                expired_at_ms: 1_796_415_565_427
            }),
            "refused: not applicable: expire: the key expired already (at \
             2026-12-04T20:19:25.427Z)"
        );
        let live = Hazard::LeaseLive {
            locked_until_ms: Some(1_800_000_030_000),
        };
        for forcing in [Forcing::Flag, Forcing::CommandLine] {
            let said = needs_force("release", &live, forcing);
            assert!(
                said.starts_with(
                    "refused: release: the key's lease is live until 2027-01-15T08:00:30.000Z: \
                     an attempt is running"
                ),
                "{said}"
            );
            assert!(said.contains("--force"), "{said}");
            assert!(!said.contains("1800000030000"), "{said}");
        }
        let effects = Hazard::EffectsExist {
            attempt: 2,
            recovery_point: Some("charge".into()),
        };
        assert!(hazard_text(&effects).starts_with(
            "the key completed in staged mode (attempt 2, recovery point \"charge\")"
        ));
    }
}
