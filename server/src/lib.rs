//! `graphc serve`: an OpenAI-compatible HTTP server over the runtime's
//! continuous batcher. `POST /v1/chat/completions`, `POST /v1/completions`
//! (whole or streamed as server-sent events), `GET /v1/models`,
//! `GET /health`, `GET /metrics` (Prometheus text).
//!
//! One engine thread steps the batch; the HTTP side (tokio, axum) parses,
//! tokenizes and formats. A request's tokens do not depend on what else is
//! being served (see `graphc_runtime::batcher`).

pub mod api;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod ollama;
pub mod routes;
pub mod tools;

use graphc_runtime::batcher::BatcherOptions;
use graphc_runtime::{Model, SessionOptions};
use metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("cannot start the server: {0}")]
    Start(String),
    #[error(transparent)]
    Runtime(#[from] graphc_runtime::Error),
}

/// Server options; `None` is resolved once in `Server::start` (see `Resolved`).
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// `None`: 127.0.0.1.
    pub host: Option<String>,
    /// `None`: 8080; 0 picks a free port.
    pub port: Option<u16>,
    /// Requests run at once; `None`: 4.
    pub slots: Option<usize>,
    /// Requests that may wait for a slot before new ones get 429; `None`: 64.
    pub max_queue: Option<usize>,
    /// Required as `Authorization: Bearer KEY` on `/v1/*` when set.
    pub api_key: Option<String>,
    /// The name `/v1/models` lists and requests may give as `model`;
    /// `None`: the checkpoint's file stem.
    pub model_name: Option<String>,
    /// Prompt tokens a slot prefills in one step; `None`: the batcher's default.
    pub prefill_chunk: Option<usize>,
    /// Reuse a slot's cached prefix of a prompt; `None`: on where the
    /// model's caches can be cut back (`BatcherOptions::prompt_cache`).
    pub prompt_cache: Option<bool>,
    pub session: SessionOptions,
}

/// What the options resolved to.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Resolved {
    pub addr: String,
    pub slots: usize,
    pub max_queue: usize,
    pub max_seq: usize,
    pub model_name: String,
    pub api_key: bool,
    pub prompt_cache: bool,
}

pub struct Server {
    addr: SocketAddr,
    resolved: Resolved,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    http: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    engine: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Bind, start the engine and serve in the background.
    pub fn start(model: Arc<Model>, opts: ServeOptions) -> Result<Server, ServeError> {
        let host = opts.host.clone().unwrap_or_else(|| "127.0.0.1".into());
        let addr = format!("{host}:{}", opts.port.unwrap_or(8080));
        let listener = std::net::TcpListener::bind(&addr).map_err(|source| ServeError::Bind { addr: addr.clone(), source })?;
        listener.set_nonblocking(true).map_err(|e| ServeError::Start(e.to_string()))?;
        let local = listener.local_addr().map_err(|e| ServeError::Start(e.to_string()))?;
        let slots = opts.slots.unwrap_or(4);
        if slots == 0 {
            return Err(ServeError::Start("--slots must be at least 1".into()));
        }
        let metrics = Arc::new(Metrics::default());
        let batcher = BatcherOptions { slots, prefill_chunk: opts.prefill_chunk, prompt_cache: opts.prompt_cache, session: opts.session.clone() };
        let engine::Started { jobs, limits, prompt_cache, thread: engine } = engine::start(model.clone(), batcher, metrics.clone())?;
        let model_name = opts.model_name.clone().unwrap_or_else(|| {
            let path = std::path::Path::new(&model.plan().checkpoint.path);
            path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "graphc".into())
        });
        let resolved = Resolved {
            addr: local.to_string(),
            slots,
            max_queue: opts.max_queue.unwrap_or(64),
            max_seq: limits.max_seq,
            model_name: model_name.clone(),
            api_key: opts.api_key.is_some(),
            prompt_cache,
        };
        let state = Arc::new(routes::AppState {
            model,
            model_name,
            jobs: std::sync::Mutex::new(Some(jobs)),
            limits,
            metrics,
            api_key: opts.api_key,
            max_queue: resolved.max_queue,
            next_id: Default::default(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("graphc-http")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| ServeError::Start(e.to_string()))?;
        let (shutdown, on_shutdown) = tokio::sync::oneshot::channel::<()>();
        let http = std::thread::Builder::new()
            .name("graphc-serve".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let app = router(state.clone());
                    let result = axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = on_shutdown.await;
                        })
                        .await;
                    // No new requests: let the engine end once it has answered the rest.
                    state.jobs.lock().unwrap().take();
                    result
                })
            })
            .map_err(|e| ServeError::Start(e.to_string()))?;
        Ok(Server { addr: local, resolved, shutdown: Some(shutdown), http: Some(http), engine: Some(engine) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn resolved(&self) -> &Resolved {
        &self.resolved
    }

    /// Stop taking connections, answer every request in flight, then stop.
    pub fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        self.join()
    }

    /// Serve until `shutdown` is called from elsewhere (or the server fails).
    pub fn join(&mut self) -> Result<(), ServeError> {
        if let Some(h) = self.http.take() {
            h.join().map_err(|_| ServeError::Start("the HTTP thread panicked".into()))?.map_err(|e| ServeError::Start(e.to_string()))?;
        }
        if let Some(e) = self.engine.take() {
            e.join().map_err(|_| ServeError::Start("the engine thread panicked".into()))?;
        }
        Ok(())
    }

    /// A handle that asks for a graceful shutdown (from a signal handler).
    pub fn shutdown_handle(&mut self) -> Option<ShutdownHandle> {
        self.shutdown.take().map(|s| ShutdownHandle(std::sync::Mutex::new(Some(s))))
    }
}

pub struct ShutdownHandle(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl ShutdownHandle {
    pub fn shutdown(&self) {
        if let Some(s) = self.0.lock().unwrap().take() {
            let _ = s.send(());
        }
    }
}

/// Every endpoint: OpenAI's (`routes`), Ollama's (`ollama`), and the small ones.
fn router(state: Arc<routes::AppState>) -> axum::Router {
    use axum::routing::{get, post};
    use routes::{chat_completions, completions, detokenize, health, metrics, model, models, tokenize};
    axum::Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/version", get(ollama::version))
        .route("/api/ps", get(ollama::ps))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error::ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .with_state(state)
}
