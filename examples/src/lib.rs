//! Runnable examples of idem. Each server's binary in `src/bin` is a thin `main` around a
//! module here, so tests can drive the same router in process.

pub mod docs;
pub mod extract;
pub mod fake_provider;
pub mod orders;
pub mod payments;
pub mod server;
