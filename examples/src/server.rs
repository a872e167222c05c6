//! What the example binaries share around their routers: logging, the environment, the
//! choice of store from `DATABASE_URL`, `GET /metrics`, and [`serve`]: HTTP/1.1 with bounded
//! slow clients, a connection limit and a graceful shutdown with a deadline.
//!
//! # Serving
//!
//! `axum::serve` sets no header or body read timer and no connection limit: a client that
//! sends half a request line, or a body that never finishes, holds its socket (and a file
//! descriptor) forever, and enough of them take the process down. [`serve`] runs each
//! connection with hyper's HTTP/1 builder and the router behind [`harden`]'s layers:
//!
//! | Variable | Default | What it bounds |
//! |---|---|---|
//! | `HEADER_READ_TIMEOUT_MS` | 10000 | receiving a request's head (hyper's `header_read_timeout`); also how long an idle keep-alive connection stays open. The connection is closed without an answer. |
//! | `MAX_HEADER_BYTES` | 32768 | the request line and headers (hyper's `max_header_size`): larger heads get hyper's `431` (empty body) and the connection is closed, before they use more memory. |
//! | `BODY_READ_TIMEOUT_MS` | 10000 | the wait for each chunk of a request body (tower-http's `RequestBodyTimeoutLayer`): `408` problem, then the connection is closed. |
//! | `REQUEST_TIMEOUT_MS` | 15000 | a whole request, body and handler included (tower-http's `TimeoutLayer`): `503` problem with `Retry-After`. The handler is dropped: its transaction rolls back, and a retry with the same key runs it again. |
//! | `MAX_CONNECTIONS` | 512 | open connections. When all are in use the server stops accepting: new connections wait in the kernel's listen backlog (refused once it is full) until one closes. Keep it below the process's file descriptor limit minus the database pool. |
//! | `SHUTDOWN_DEADLINE_MS` | 20000 | graceful shutdown: after SIGTERM or SIGINT the server stops accepting, lets requests in flight finish and closes idle connections; whatever is still open at the deadline is dropped (rolled back) and the process exits. |
//!
//! Accept errors (`EMFILE` when the descriptors run out anyway, …) are logged and retried
//! after a back-off; they never end the server. The timeouts' answers are
//! `application/problem+json`; hyper's own answers to a malformed, oversized or too long
//! request head (`400`, `431`, `414`) have empty bodies and no way to change them here.
//!
//! Only HTTP/1.1 is served. A client that never reads a large response is not timed out on
//! the write side: the examples' responses are small, but put a proxy in front for that.
//!
//! The gauge `http_open_connections` and the counter `http_accept_errors_total` are
//! recorded through the `metrics` facade; [`install_metrics`] and [`metrics_routes`] expose
//! them, and the runtime's `idem_*` metrics, as `GET /metrics`.

use std::convert::Infallible;
use std::error::Error;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use idem_runtime::Problem;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutBody, TimeoutError, TimeoutLayer};

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

/// `DATABASE_POOL_SIZE` (at least 1), or idem's default: the pool idem opens
/// ([`Config::max_connections`](idem_runtime::Config::max_connections)). The process keeps
/// up to twice this many database connections: the pool, and as many for idem's request path
/// beside it (three times with `Config::attempt_holds`).
///
/// # Errors
/// When it is not a whole number of at least 1.
pub fn pool_size() -> Result<u32, Box<dyn Error>> {
    let default = idem_runtime::Config::default().max_connections;
    let size = env_number("DATABASE_POOL_SIZE", default as usize, 1)?;
    Ok(u32::try_from(size).map_err(|_| format!("DATABASE_POOL_SIZE={size}: too large"))?)
}

/// Connects idem to `url` with `config`, and applies idem's migrations and the examples' own
/// (the tables of [`crate::orders`] and [`crate::payments`]).
///
/// `MIGRATION_DATABASE_URL`, when set, is a direct URL of the same database: the migrations
/// run over a connection of their own to it, and `url` is taken to go through a transaction
/// pooler (PgBouncer in `pool_mode = transaction`): idem runs with
/// [`Config::transaction_pooler`](idem_runtime::Config::transaction_pooler), and the
/// examples' queries go unprepared, inside transactions. Without it, idem's migrations still
/// work through such a pooler, but sqlx's migrator (the examples' tables) takes a session
/// lock and prepares its statements there: a start that finds such a pooler (see
/// [`Idem::connect`](idem_runtime::Idem::connect)), or fails on a prepared statement or a
/// startup parameter, says to set it. Empty counts as unset.
///
/// `DATABASE_URL` may be a PostgreSQL host list (`postgres://db1,db2/shop?target_session_attrs=read-write`,
/// see [`idem_runtime::store::hosts`]): after a failover the servers' new connections find
/// the promoted standby. `REPLICA_DATABASE_URL`, when set (empty counts as unset), is a
/// standby replays are read from first ([`Config::replica`](idem_runtime::Config::replica)).
///
/// `IDEM_MIGRATIONS=external` says idem's tables are applied by another tool (the files of
/// the repository's `migrations/<store>/`, in order): idem runs with
/// [`Config::external_migrations`](idem_runtime::Config::external_migrations), applies none
/// of its migrations, and the start fails naming the first one missing. Unset (or `idem`):
/// idem applies them.
///
/// `IDEM_STORAGE_KEYS`, when set (empty counts as unset), seals what idem stores at rest
/// ([`Config::storage_keys`](idem_runtime::Config::storage_keys)): comma-separated
/// `ID:BASE64` entries of 32 random bytes each, the first sealing, every one opening
/// ([`Keyring::parse`](idem_runtime::store::Keyring::parse)); one is made by
/// `echo "k1:$(head -c 32 /dev/urandom | base64)"`. Without it, the start is refused when
/// the key table's newest rows are sealed (an instance that lost its keyring in a fleet that
/// seals), unless `IDEM_CLEAR_BESIDE_SEALED=1`
/// ([`Config::clear_beside_sealed`](idem_runtime::Config::clear_beside_sealed)).
///
/// # Errors
/// When the database is unreachable, a migration fails, (`IDEM_MIGRATIONS=external`) one is
/// missing, `IDEM_STORAGE_KEYS` is not a keyring (the error names the entry, never a key), or
/// is missing on a key table that is sealed.
pub async fn connect<DB: crate::orders::OrdersDb>(
    url: &str,
    config: idem_runtime::Config,
) -> Result<idem_runtime::Idem<DB>, Box<dyn Error>> {
    let migration_url = std::env::var("MIGRATION_DATABASE_URL")
        .ok()
        .filter(|url| !url.is_empty());
    let external = match std::env::var("IDEM_MIGRATIONS")
        .unwrap_or_default()
        .as_str()
    {
        "" | "idem" => false,
        "external" => true,
        other => {
            return Err(format!("IDEM_MIGRATIONS: `external` or `idem`, not `{other}`").into());
        }
    };
    let mut config = config
        .transaction_pooler(migration_url.is_some())
        .external_migrations(external);
    if let Some(keys) = std::env::var("IDEM_STORAGE_KEYS")
        .ok()
        .filter(|keys| !keys.trim().is_empty())
    {
        let ring = idem_runtime::store::Keyring::parse(&keys)
            .map_err(|e| format!("IDEM_STORAGE_KEYS: {e}"))?;
        config = config.storage_keys(ring);
    }
    if std::env::var("IDEM_CLEAR_BESIDE_SEALED").is_ok_and(|v| v == "1") {
        config = config.clear_beside_sealed(true);
    }
    if let Some(replica) = std::env::var("REPLICA_DATABASE_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        config = config.replica(replica);
    }
    let connected = async {
        let idem = idem_runtime::Idem::<DB>::connect(url, config).await?;
        match &migration_url {
            Some(direct) => {
                let pool = sqlx::pool::PoolOptions::<DB>::new()
                    .max_connections(1)
                    .connect(direct)
                    .await
                    .map_err(|e| format!("MIGRATION_DATABASE_URL: {e}"))?;
                if external {
                    idem_runtime::store::check_schema(&pool).await?;
                } else {
                    idem_runtime::store::migrate(&pool).await?;
                }
                DB::migrate_orders(&pool).await?;
                pool.close().await;
                idem.check_storage_keys().await.map_err(keys_hint)?;
            }
            None => {
                idem.migrate().await.map_err(keys_hint)?;
                DB::migrate_orders(idem.pool()).await?;
            }
        }
        Ok::<_, Box<dyn Error>>(idem)
    };
    connected.await.map_err(|error| {
        let text = error.to_string();
        let pooled = text.contains("prepared statement") || text.contains("startup parameter");
        if pooled && migration_url.is_none() {
            format!(
                "{text} (DATABASE_URL seems to go through a transaction pooler: set \
                 MIGRATION_DATABASE_URL to a direct URL of the database)"
            )
            .into()
        } else {
            error
        }
    })
}

/// A start refused for want of storage keys, saying which variables change that.
fn keys_hint(error: idem_runtime::store::StoreError) -> Box<dyn Error> {
    match error {
        idem_runtime::store::StoreError::NeedsStorageKeys(_) => format!(
            "{error} (set IDEM_STORAGE_KEYS, or IDEM_CLEAR_BESIDE_SEALED=1 to start anyway)"
        )
        .into(),
        other => other.into(),
    }
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
    /// `mysql:` or `mariadb:` (which servers: the store's feature table, `idem_runtime::store`).
    MySql,
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
        } else if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            Ok(Self::MySql)
        } else {
            Err(
                "DATABASE_URL must start with sqlite:, postgres:, postgresql:, mysql: or mariadb:"
                    .into(),
            )
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

/// How [`serve`] bounds slow clients, connections and shutdown; see the module's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `HEADER_READ_TIMEOUT_MS`.
    pub header_read_timeout: Duration,
    /// `MAX_HEADER_BYTES`.
    pub max_header_bytes: usize,
    /// `BODY_READ_TIMEOUT_MS`.
    pub body_read_timeout: Duration,
    /// `REQUEST_TIMEOUT_MS`.
    pub request_timeout: Duration,
    /// `MAX_CONNECTIONS`.
    pub max_connections: usize,
    /// `SHUTDOWN_DEADLINE_MS`.
    pub shutdown_deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 32 * 1024,
            body_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(15),
            max_connections: 512,
            shutdown_deadline: Duration::from_secs(20),
        }
    }
}

impl Limits {
    /// The defaults, overridden by the variables that are set.
    ///
    /// # Errors
    /// When one is not a whole number, is zero, or `MAX_HEADER_BYTES` is under 1024.
    pub fn from_env() -> Result<Self, Box<dyn Error>> {
        let default = Self::default();
        Ok(Self {
            header_read_timeout: env_ms("HEADER_READ_TIMEOUT_MS", default.header_read_timeout)?,
            max_header_bytes: env_number("MAX_HEADER_BYTES", default.max_header_bytes, 1024)?,
            body_read_timeout: env_ms("BODY_READ_TIMEOUT_MS", default.body_read_timeout)?,
            request_timeout: env_ms("REQUEST_TIMEOUT_MS", default.request_timeout)?,
            max_connections: env_number("MAX_CONNECTIONS", default.max_connections, 1)?,
            shutdown_deadline: env_ms("SHUTDOWN_DEADLINE_MS", default.shutdown_deadline)?,
        })
    }
}

fn env_number(name: &str, default: usize, min: usize) -> Result<usize, String> {
    let Ok(text) = std::env::var(name) else {
        return Ok(default);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "{name}={text}: expected a whole number of at least {min}"
        )),
    }
}

fn env_ms(name: &str, default: Duration) -> Result<Duration, String> {
    let default_ms = usize::try_from(default.as_millis()).unwrap_or(usize::MAX);
    let ms = env_number(name, default_ms, 1)?;
    Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
}

/// `router` behind the request timeout (`503` problem) and the body read timeout (`408`
/// problem). [`serve`] applies it; it is public for serving the router some other way.
///
/// The layers wrap the router as a whole rather than each route (`Router::layer`): a
/// route's layers are boxed one inside the other and cloned, box by box, for every request,
/// while these are cloned whole, without allocating (`bench/RESULTS.md`). They run for
/// every request, an unknown path's included.
pub fn harden(
    router: Router,
    limits: &Limits,
) -> impl tower::Service<
    hyper::Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send + 'static,
> + Clone
+ Send
+ 'static {
    // Outermost first: the request timeout covers everything, the body timeout wraps the
    // body before the handler reads it, and the 408 rewrite sees the body's errors.
    tower::ServiceBuilder::new()
        .map_request(|request: hyper::Request<Incoming>| request.map(Body::new))
        .map_response({
            let limits = *limits;
            move |response| request_timeout_problem(limits, response)
        })
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        .layer(RequestBodyTimeoutLayer::new(limits.body_read_timeout))
        .layer_fn({
            let limits = *limits;
            move |inner| BodyTimeoutAnswers408 { inner, limits }
        })
        .service(router)
}

/// The body timeout surfaces as an error of the body to whoever reads it (idem answers a
/// `400` for an unreadable body); this notes it and answers `408` instead, closing the
/// connection, since the rest of the body may still come.
#[derive(Clone)]
struct BodyTimeoutAnswers408<S> {
    inner: S,
    limits: Limits,
}

impl<S> tower::Service<Request<TimeoutBody<Body>>> for BodyTimeoutAnswers408<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<TimeoutBody<Body>>) -> Self::Future {
        let timed_out = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&timed_out);
        let request = request.map(|body| {
            Body::new(body.map_err(move |error| {
                if caused_by::<TimeoutError>(&*error) {
                    seen.store(true, Ordering::Relaxed);
                }
                error
            }))
        });
        let response = self.inner.call(request);
        let limits = self.limits;
        Box::pin(async move {
            let response = response.await?;
            if !timed_out.load(Ordering::Relaxed) {
                return Ok(response);
            }
            let mut response = Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "urn:idem:example:body-timeout",
                "request body timed out",
            )
            .with_detail(format!(
                "no part of the request body arrived for {} ms",
                limits.body_read_timeout.as_millis()
            ))
            .into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Ok(response)
        })
    }
}

/// tower-http's `TimeoutLayer` answers with an empty body; this turns its bare `503` into a
/// problem. Every `503` of the examples themselves is a problem already (it has a
/// `Content-Type`), and passes through.
fn request_timeout_problem(limits: Limits, response: Response) -> Response {
    if response.status() != StatusCode::SERVICE_UNAVAILABLE
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "urn:idem:example:request-timeout",
        "request timed out",
    )
    .with_detail(format!(
        "the request took longer than {} ms; whatever it did was rolled back, retry it",
        limits.request_timeout.as_millis()
    ))
    .with_retry_after(Duration::from_secs(1))
    .into_response()
}

/// Whether `error`, or anything it wraps, is an `E`.
fn caused_by<E: Error + 'static>(error: &(dyn Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<E>() {
            return true;
        }
        current = error.source();
    }
    false
}

/// Serves `app` behind [`harden`] on `listener` until `shutdown` completes, within
/// `limits`; see the module documentation. Returns once every connection closed, or at the
/// shutdown deadline with the remaining ones dropped.
///
/// # Errors
/// None so far: accept errors are logged and retried. The `io::Result` leaves room for
/// listeners that can fail for good.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let app = harden(app, limits);
    serve_connections(listener, limits, shutdown, move |stream| {
        (stream, app.clone())
    })
    .await
}

/// [`serve`] for servers that need their connections: `connection` turns each accepted
/// stream into the I/O object hyper uses and the service that answers on it (the caller
/// applies [`harden`] itself).
///
/// # Errors
/// As [`serve`].
pub async fn serve_connections<I, S, F>(
    listener: TcpListener,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send,
    mut connection: F,
) -> io::Result<()>
where
    F: FnMut(TcpStream) -> (I, S),
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<hyper::Request<Incoming>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut shutdown = std::pin::pin!(shutdown);

    loop {
        // A free slot first: while every slot is taken, new connections wait in the
        // kernel's backlog instead of using descriptors and memory here.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = Arc::clone(&slots).acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break }; // never closed
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                stream
            }
            // The client gave up before we took its connection: nothing to do.
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                metrics::counter!("http_accept_errors_total").increment(1);
                tracing::warn!(%error, retry_in = ?backoff, "accepting a connection failed");
                drop(slot);
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        // Small answers should not wait for Nagle's algorithm; failing to set it is harmless.
        let _ = stream.set_nodelay(true);
        let (io, service) = connection(stream);
        let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        let open = OpenConnection::new(slot);
        connections.spawn(async move {
            if let Err(error) = conn.await {
                // Header timeouts, oversized heads, clients that went away.
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(open);
        });
    }

    // Stop accepting: connections arriving from now on are refused by the kernel.
    drop(listener);
    tracing::info!(
        open = connections.len(),
        deadline = ?limits.shutdown_deadline,
        "shutting down: finishing requests in flight"
    );
    if tokio::time::timeout(limits.shutdown_deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            dropped = connections.len(),
            "shutdown deadline passed: dropping the connections still open"
        );
    }
    // Aborts whatever is left; a request dropped here rolls its transaction back.
    connections.shutdown().await;
    Ok(())
}

const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One open connection: holds its slot and counts in `http_open_connections` until dropped,
/// however the connection's task ends.
struct OpenConnection {
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl OpenConnection {
    fn new(slot: tokio::sync::OwnedSemaphorePermit) -> Self {
        metrics::gauge!("http_open_connections").increment(1.0);
        Self { _slot: slot }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!("http_open_connections").decrement(1.0);
    }
}

/// Installs the process's Prometheus recorder, once, before anything records: histograms
/// named `…_seconds` and `…_bytes` get buckets (instead of the exporter's default
/// summaries), and a task keeps the recorder's upkeep running. Call it from `main`, never
/// from code that tests run in process more than once.
///
/// # Errors
/// When a recorder is installed already.
pub fn install_metrics() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".into()),
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
        )?
        .set_buckets_for_metric(
            Matcher::Suffix("_bytes".into()),
            &[
                64.0,
                256.0,
                1024.0,
                4096.0,
                16384.0,
                65536.0,
                262_144.0,
                1_048_576.0,
            ],
        )?
        .install_recorder()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// `GET /metrics`: everything recorded, in Prometheus' text format.
pub fn metrics_routes(handle: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let text = handle.render();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    )],
                    text,
                )
            }
        }),
    )
}
