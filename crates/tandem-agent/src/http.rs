//! The agent's HTTP endpoints (actix-web): `/healthz` (the process is alive), `/readyz` (ready
//! in the current epoch; 503 with a JSON reason when not), `/status` (JSON), `/metrics`
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
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn readyz(state: web::Data<HttpState>) -> HttpResponse {
    let Some(protocol) = state.router.current() else {
        return HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "reason": "between epochs" }));
    };
    match protocol.send(GetStatus).await {
        Ok(s) if s.ready => HttpResponse::Ok().json(json!({ "ready": true, "epoch": s.epoch })),
        Ok(s) => HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "epoch": s.epoch, "reason": s.reason })),
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
    let status = status_json(&state).await;
    let html = tandem_metrics::render_status_html("Tandem agent", &status);
    HttpResponse::Ok()
        .content_type(tandem_metrics::HTML_CONTENT_TYPE)
        .body(html)
}

async fn status_json(state: &HttpState) -> serde_json::Value {
    let Some(protocol) = state.router.current() else {
        return json!({ "ready": false, "reason": "between epochs" });
    };
    match (
        protocol.send(GetStatus).await,
        state.store.send(GetStoreStats).await,
    ) {
        (Ok(p), Ok(s)) => json!({ "agent": p, "store": s }),
        (p, s) => {
            json!({ "ready": false, "reason": format!("actors unavailable: protocol {:?}, store {:?}", p.err(), s.err()) })
        }
    }
}

async fn status(state: web::Data<HttpState>) -> HttpResponse {
    let Some(protocol) = state.router.current() else {
        return HttpResponse::ServiceUnavailable().json(json!({ "error": "between epochs" }));
    };
    let protocol = protocol.send(GetStatus).await;
    let store = state.store.send(GetStoreStats).await;
    match (protocol, store) {
        (Ok(p), Ok(s)) => HttpResponse::Ok().json(json!({ "agent": p, "store": s })),
        (p, s) => HttpResponse::ServiceUnavailable().json(json!({
            "error": format!("actors unavailable: protocol {:?}, store {:?}", p.err(), s.err()),
        })),
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
            .route("/", web::get().to(page))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?
    .run();
    Ok(server)
}
