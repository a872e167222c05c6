//! [`Case`]: one situation of a request, and what it is answered.

/// Media type of idem's error bodies.
pub const PROBLEM_MEDIA_TYPE: &str = "application/problem+json";

/// One situation a request of the operation can be in, and what it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Case {
    /// The status, as OpenAPI keys responses: `"409"`, or `"2XX"` for the operation's own
    /// success when its exact status is not documented.
    pub status: String,
    /// The problem type (`urn:idem:problem:…`) of the body, when the body is a problem.
    pub problem: Option<&'static str>,
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
            when,
            then: then.to_owned(),
            retry_after: false,
            replayed: false,
        }
    }

    /// The same, with `Retry-After`.
    pub(super) fn retry_after(mut self) -> Self {
        self.retry_after = true;
        self
    }
}
