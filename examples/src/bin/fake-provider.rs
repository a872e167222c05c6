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
//! - `PROVIDER_WEBHOOK_URL`: where each new charge's signed `charge.succeeded` event is
//!   sent, an `http:` URL, default `http://127.0.0.1:3001/webhooks/provider` (the `payments`
//!   example's receiver, at its default address).
//! - `PROVIDER_WEBHOOK_SECRET`: the Standard Webhooks secret the events are signed with,
//!   `whsec_` and the key's base64, default `whsec_aWRlbS1leGFtcGxlLXNlY3JldA==` (the one
//!   `payments` expects by default).
//!
//! Webhooks are always sent, retried until the receiver answers `2xx` (see
//! [`idem_examples::fake_provider`]'s Webhooks); an invalid URL or secret stops the server
//! before it listens.
//!
//! Logs `listening on http://ADDR` (the address actually bound) once it accepts connections,
//! and shuts down gracefully on SIGTERM or SIGINT. The HTTP contract is described in
//! [`idem_examples::fake_provider`].

use std::error::Error;
use std::process::ExitCode;

use idem_examples::fake_provider::{self, Provider, WebhookConfig, WebhookConfigError};
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
    let webhooks = WebhookConfig::new(
        &server::env_or("PROVIDER_WEBHOOK_URL", fake_provider::DEFAULT_WEBHOOK_URL),
        &server::env_or(
            "PROVIDER_WEBHOOK_SECRET",
            fake_provider::DEFAULT_WEBHOOK_SECRET,
        ),
    )
    .map_err(|e| match e {
        WebhookConfigError::Url(why) => format!("PROVIDER_WEBHOOK_URL: {why}"),
        WebhookConfigError::Secret(why) => format!("PROVIDER_WEBHOOK_SECRET: {why}"),
        WebhookConfigError::Client(why) => why,
    })?;
    let shutdown = server::shutdown_signal()?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!("sending webhooks to {}", webhooks.url());
    tracing::info!("listening on http://{}", listener.local_addr()?);
    let provider = Provider::with_webhooks(webhooks);
    fake_provider::serve_within(listener, provider, &limits, shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}
