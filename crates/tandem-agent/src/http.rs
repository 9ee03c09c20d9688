//! The agent's HTTP endpoints (actix-web): `/healthz` (the process is alive), `/readyz` (ready
//! in the current epoch with every tier taking work; 503 with a JSON reason when not, naming
//! a degraded tier), `/status` (JSON), `/index` (rank 0's group index, `events::http`), `/metrics`
//! (Prometheus text, OpenMetrics when asked for) and `/` (a status page for a person).
//!
//! Handlers only ask the actors through messages; they never hold protocol state.

use actix::Addr;
use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::json;

use crate::protocol::GetStatus;
use crate::router::Router;
use crate::store_actor::{GetStoreStats, StoreActor};

/// What the handlers reach.
#[derive(Clone)]
pub struct HttpState {
    /// The current epoch's protocol actor.
    pub router: Router,
    /// The store actor.
    pub store: Addr<StoreActor>,
    /// The agent's metrics.
    pub metrics: std::sync::Arc<tandem_metrics::AgentMetrics>,
    /// Whether the disk tier is degraded (a transfer past its deadline).
    pub disk: crate::disk_io::DiskHealth,
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn readyz(state: web::Data<HttpState>) -> HttpResponse {
    if let Some(reason) = state.disk.degraded() {
        return HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "reason": reason, "degraded_tier": "disk" }));
    }
    let Some(protocol) = state.router.current() else {
        return HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "reason": "between epochs" }));
    };
    match protocol.send(GetStatus).await {
        Ok(s) if s.ready() => {
            HttpResponse::Ok().json(json!({ "ready": true, "epoch": s.rank.epoch }))
        }
        Ok(s) => HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "epoch": s.rank.epoch, "reason": s.rank.reason })),
        Err(e) => HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "reason": format!("protocol actor unavailable: {e}") })),
    }
}

async fn metrics(state: web::Data<HttpState>, req: actix_web::HttpRequest) -> HttpResponse {
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
    let e = state.metrics.exposition(accept);
    HttpResponse::Ok().content_type(e.content_type).body(e.body)
}

async fn page(state: web::Data<HttpState>) -> HttpResponse {
    let (status, _) = status_json(&state).await;
    let html = tandem_metrics::render_agent_page(&status);
    HttpResponse::Ok()
        .content_type(tandem_metrics::HTML_CONTENT_TYPE)
        .body(html)
}

/// The `/status` document: `{agent, store, state, restarts, unix_ms}`; between epochs (or
/// with an actor gone) `{ready: false, reason, error, state, restarts, unix_ms}` and `false`.
async fn status_json(state: &HttpState) -> (serde_json::Value, bool) {
    let m = &state.metrics;
    let common = json!({
        // The not-ready reason's label value, or "ready": the same word the alerts carry.
        "state": m.not_ready().map_or("ready", |r| r.as_str()),
        "disk_degraded": state.disk.degraded(),
        "restarts": m.restarts().get(),
        "unix_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    });
    let (mut doc, ok) = match state.router.current() {
        None => (
            json!({ "ready": false, "reason": "between epochs", "error": "between epochs" }),
            false,
        ),
        Some(protocol) => match (
            protocol.send(GetStatus).await,
            state.store.send(GetStoreStats).await,
        ) {
            (Ok(p), Ok(s)) => (json!({ "agent": p, "store": s }), true),
            (p, s) => {
                let why = format!(
                    "actors unavailable: protocol {:?}, store {:?}",
                    p.err(),
                    s.err()
                );
                (
                    json!({ "ready": false, "reason": why, "error": why }),
                    false,
                )
            }
        },
    };
    if let (Some(d), Some(c)) = (doc.as_object_mut(), common.as_object()) {
        d.extend(c.clone());
    }
    (doc, ok)
}

async fn status(state: web::Data<HttpState>) -> HttpResponse {
    match status_json(&state).await {
        (doc, true) => HttpResponse::Ok().json(doc),
        (doc, false) => HttpResponse::ServiceUnavailable().json(doc),
    }
}

/// Bind and start the HTTP server on one worker; it runs until the actor system stops.
///
/// # Errors
/// The bind error.
pub fn start(
    addr: std::net::SocketAddr,
    state: HttpState,
) -> std::io::Result<actix_web::dev::Server> {
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(state.clone()))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
            .route("/status", web::get().to(status))
            .route("/metrics", web::get().to(metrics))
            .route("/index", web::get().to(crate::events::http::index))
            .route("/", web::get().to(page))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?
    .run();
    Ok(server)
}
