//! `fake-provider`: a stand-in payment provider that misbehaves on demand.
//!
//! ```text
//! cargo run --release -p idem-examples --bin fake-provider
//! ```
//!
//! - `LISTEN_ADDR`: default `127.0.0.1:3900`; port `0` picks a free port.
//! - `HEADER_READ_TIMEOUT_MS`, `MAX_HEADER_BYTES`, `BODY_READ_TIMEOUT_MS`,
//!   `REQUEST_TIMEOUT_MS`, `MAX_CONNECTIONS`, `SHUTDOWN_DEADLINE_MS`: as for `orders`
//!   ([`idem_examples::server`]); a `delay_ms` over `REQUEST_TIMEOUT_MS` answers `503`.
//!
//! Logs `listening on http://ADDR` (the address actually bound) once it accepts connections,
//! and shuts down gracefully on SIGTERM or SIGINT. The HTTP contract is described in
//! [`idem_examples::fake_provider`].

use std::error::Error;
use std::process::ExitCode;

use idem_examples::fake_provider::{self, Provider};
use idem_examples::server;
use tokio::net::TcpListener;

const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3900";

#[tokio::main]
async fn main() -> ExitCode {
    server::init_tracing();
    server::exit("fake-provider", serve().await)
}

async fn serve() -> Result<(), Box<dyn Error>> {
    let addr = server::listen_addr(DEFAULT_LISTEN_ADDR)?;
    let limits = server::Limits::from_env()?;
    let shutdown = server::shutdown_signal()?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    fake_provider::serve_within(listener, Provider::new(), &limits, shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}
