//! The supervisor's HTTP endpoints: `/healthz`, `/readyz` (503 with the reason when the group
//! is not ready), `/status` (JSON: the supervisor's snapshot with what every rank's agent
//! says), `/metrics` (Prometheus), `/` (the group's status page for a person) and
//! `/ranks/{r}` (rank r's page, read from its agent, so that a browser reaching only the
//! supervisor sees every rank). Handlers only read the published snapshot and the
//! collector's readings; they never decide anything.

use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::json;

use crate::collector::{status_document, SharedCollected};
use crate::runner::{Published, SharedView};

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn readyz(view: web::Data<SharedView>) -> HttpResponse {
    let v = match view.lock() {
        Ok(v) => v.clone(),
        Err(_) => {
            return HttpResponse::InternalServerError()
                .json(json!({ "ready": false, "reason": "status lock poisoned" }))
        }
    };
    if v.ready {
        HttpResponse::Ok().json(json!({ "ready": true, "epoch": v.epoch }))
    } else {
        HttpResponse::ServiceUnavailable()
            .json(json!({ "ready": false, "epoch": v.epoch, "reason": v.reason }))
    }
}

/// The `/status` document, or why it cannot be built.
fn document(view: &SharedView, collected: &SharedCollected) -> Result<serde_json::Value, String> {
    let v = view
        .lock()
        .map_err(|_| "status lock poisoned".to_string())
        .and_then(|v| serde_json::to_value(&*v).map_err(|e| e.to_string()))?;
    let c = collected
        .lock()
        .map_err(|_| "collector lock poisoned".to_string())?;
    Ok(status_document(v, &c))
}

async fn status(
    view: web::Data<SharedView>,
    collected: web::Data<SharedCollected>,
) -> HttpResponse {
    match document(&view, &collected) {
        Ok(doc) => HttpResponse::Ok().json(doc),
        Err(e) => HttpResponse::InternalServerError().json(json!({ "error": e })),
    }
}

async fn metrics(published: web::Data<Published>, req: actix_web::HttpRequest) -> HttpResponse {
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
    let e = published.metrics.exposition(accept);
    HttpResponse::Ok().content_type(e.content_type).body(e.body)
}

async fn page(view: web::Data<SharedView>, collected: web::Data<SharedCollected>) -> HttpResponse {
    let doc = document(&view, &collected).unwrap_or_else(|e| json!({ "reason": e }));
    HttpResponse::Ok()
        .content_type(tandem_metrics::HTML_CONTENT_TYPE)
        .body(tandem_metrics::render_supervisor_page(&doc))
}

/// Rank r's page from the collector's last reading of its `/status` (at most
/// [`crate::collector::INTERVAL`] old); 404 for a rank outside the group.
async fn rank_page(rank: web::Path<usize>, collected: web::Data<SharedCollected>) -> HttpResponse {
    let reading = match collected.lock() {
        Ok(c) => c.ranks.get(*rank).cloned(),
        Err(_) => None,
    };
    let Some(reading) = reading else {
        return HttpResponse::NotFound()
            .content_type("text/plain")
            .body(format!("no rank {rank} in this group\n"));
    };
    let mut doc = reading.status.unwrap_or_else(|| {
        json!({
            "ready": false,
            "reason": format!(
                "the agent at {} does not answer: {}",
                reading.addr,
                reading.error.as_deref().unwrap_or("not read yet")
            ),
        })
    });
    if let Some(obj) = doc.as_object_mut() {
        obj.insert(
            "read_by_supervisor_from".into(),
            json!(format!("http://{}", reading.addr)),
        );
    }
    HttpResponse::Ok()
        .content_type(tandem_metrics::HTML_CONTENT_TYPE)
        .body(tandem_metrics::render_agent_page(&doc))
}

/// Bind and start the server on one worker.
///
/// # Errors
/// The bind error.
pub fn start(
    addr: &str,
    published: Published,
    collected: SharedCollected,
) -> std::io::Result<actix_web::dev::Server> {
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(published.view.clone()))
            .app_data(web::Data::new(published.clone()))
            .app_data(web::Data::new(collected.clone()))
            .route("/metrics", web::get().to(metrics))
            .route("/", web::get().to(page))
            .route("/ranks/{rank}", web::get().to(rank_page))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
            .route("/status", web::get().to(status))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?
    .run())
}
