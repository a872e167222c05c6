//! [`Case`]: one situation of a request, and what it is answered.

/// Media type of idem's error bodies.
pub const PROBLEM_MEDIA_TYPE: &str = "application/problem+json";

/// The prefix of idem's own problem types (`urn:idem:problem:in-flight`): an application's
/// own problems ([`OperationDoc::problem`](crate::OperationDoc::problem)) have other types.
pub const IDEM_PROBLEM_PREFIX: &str = "urn:idem:problem:";

/// One situation a request of the operation can be in, and what it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Case {
    /// The status, as OpenAPI keys responses: `"409"`, or `"2XX"` for the operation's own
    /// success when its exact status is not documented.
    pub status: String,
    /// idem's problem type (`urn:idem:problem:…`) of the body, when the body is one of
    /// idem's problems.
    pub problem: Option<&'static str>,
    /// The problem type of the body when it is one of the operation's own problems
    /// ([`OperationDoc::problem`](crate::OperationDoc::problem)), never idem's.
    pub own_problem: Option<String>,
    /// When this is the answer.
    pub when: String,
    /// What the client should do.
    pub then: String,
    /// The response carries `Retry-After`.
    pub retry_after: bool,
    /// The response carries `Idempotent-Replayed: true`.
    pub replayed: bool,
}

impl Case {
    /// A problem of idem's: `status`, its problem `type`, when and what the client does.
    pub(super) fn problem(status: u16, problem: &'static str, when: String, then: &str) -> Self {
        Self {
            status: status.to_string(),
            problem: Some(problem),
            own_problem: None,
            when,
            then: then.to_owned(),
            retry_after: false,
            replayed: false,
        }
    }

    /// The problem type of the body, idem's (`problem`) or the operation's own
    /// (`own_problem`), when the body is a problem.
    #[must_use]
    pub fn problem_type(&self) -> Option<&str> {
        self.problem.or(self.own_problem.as_deref())
    }

    /// The same, with `Retry-After`.
    pub(super) fn retry_after(mut self) -> Self {
        self.retry_after = true;
        self
    }
}
