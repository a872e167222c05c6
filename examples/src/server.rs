//! What the example binaries share around their routers: logging, the environment, the
//! choice of store from `DATABASE_URL`, and a graceful shutdown on SIGTERM or SIGINT.

use std::error::Error;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

/// Logs to standard output, filtered by `RUST_LOG` (default `info`), in colour on a terminal.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
}

/// The variable `name`, or `default` when it is unset.
#[must_use]
pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// `LISTEN_ADDR`, or `default`.
///
/// # Errors
/// When it is not an address.
pub fn listen_addr(default: &str) -> Result<SocketAddr, Box<dyn Error>> {
    Ok(env_or("LISTEN_ADDR", default)
        .parse()
        .map_err(|e| format!("LISTEN_ADDR: {e}"))?)
}

/// Which store a `DATABASE_URL` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// `postgres:` or `postgresql:`.
    Postgres,
    /// `sqlite:`.
    Sqlite,
}

impl Store {
    /// The store of `url`.
    ///
    /// # Errors
    /// For any other scheme.
    pub fn of(url: &str) -> Result<Self, Box<dyn Error>> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Self::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else {
            Err("DATABASE_URL must start with sqlite:, postgres: or postgresql:".into())
        }
    }
}

/// Resolves once SIGTERM or SIGINT arrives. The handlers are installed now, so call it
/// before logging that the server listens: a signal sent as soon as that line shows is not
/// missed.
///
/// # Errors
/// When the handlers cannot be installed.
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
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

/// The exit code for how `name` ended; an error is logged first.
#[must_use]
pub fn exit(name: &str, result: Result<(), Box<dyn Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{name}: {error}");
            ExitCode::FAILURE
        }
    }
}
