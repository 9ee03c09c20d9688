//! The supervisor's HTTP endpoints: `/healthz`, `/readyz` (503 with the reason when the group
//! is not ready), `/status` (JSON), `/metrics` (Prometheus) and `/` (a status page for a
//! person). Handlers only read the published snapshot.

use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::json;

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

async fn status(view: web::Data<SharedView>) -> HttpResponse {
    match view.lock() {
        Ok(v) => HttpResponse::Ok().json(&*v),
        Err(_) => {
            HttpResponse::InternalServerError().json(json!({ "error": "status lock poisoned" }))
        }
    }
}

async fn metrics(published: web::Data<Published>, req: actix_web::HttpRequest) -> HttpResponse {
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
    let e = published.metrics.exposition(accept);
    HttpResponse::Ok().content_type(e.content_type).body(e.body)
}

async fn page(view: web::Data<SharedView>) -> HttpResponse {
    let status = match view.lock() {
        Ok(v) => serde_json::to_value(&*v).unwrap_or_default(),
        Err(_) => json!({ "error": "status lock poisoned" }),
    };
    let html = tandem_metrics::render_status_html("Tandem supervisor", &status);
    HttpResponse::Ok()
        .content_type(tandem_metrics::HTML_CONTENT_TYPE)
        .body(html)
}

/// Bind and start the server on one worker.
///
/// # Errors
/// The bind error.
pub fn start(addr: &str, published: Published) -> std::io::Result<actix_web::dev::Server> {
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(published.view.clone()))
            .app_data(web::Data::new(published.clone()))
            .route("/metrics", web::get().to(metrics))
            .route("/", web::get().to(page))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
            .route("/status", web::get().to(status))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?
    .run())
}
