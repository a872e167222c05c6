//! `fake-provider`: a stand-in payment provider that misbehaves on demand.
//!
//! ```text
//! cargo run --release -p idem-examples --bin fake-provider
//! ```
//!
//! - `LISTEN_ADDR`: default `127.0.0.1:3900`; port `0` picks a free port.
//!
//! Logs `listening on http://ADDR` (the address actually bound) once it accepts connections,
//! and shuts down gracefully on SIGTERM or SIGINT. The HTTP contract is described in
//! [`idem_examples::fake_provider`].

use std::error::Error;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use idem_examples::fake_provider::{self, Provider};
use tokio::net::TcpListener;

const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3900";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("fake-provider: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> Result<(), Box<dyn Error>> {
    let addr: SocketAddr = std::env::var("LISTEN_ADDR")
        .unwrap_or_else(|_| DEFAULT_LISTEN_ADDR.to_owned())
        .parse()
        .map_err(|e| format!("LISTEN_ADDR: {e}"))?;
    let shutdown = shutdown_signal()?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    fake_provider::serve(listener, Provider::new(), shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}

/// Installs the signal handlers at once, so a signal sent as soon as the server says it is
/// listening is not missed.
fn shutdown_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    Ok(async { tokio::signal::ctrl_c().await.unwrap_or(()) })
}
