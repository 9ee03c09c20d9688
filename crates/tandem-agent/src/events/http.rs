//! `GET /index` on rank 0: every complete block of the leader's group index with its medium,
//! in the event stream's terms, so that a subscriber's view can be checked against it.
//! 404 on a follower, 503 between epochs.

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::wire::medium;
use crate::http::HttpState;
use crate::protocol::index_blocks::GetIndexBlocks;

/// `{"epoch": E, "blocks": [["<32 hex digits>", "CPU"], ...]}`, sorted by hash.
pub async fn index(state: web::Data<HttpState>) -> HttpResponse {
    let Some(protocol) = state.router.current() else {
        return HttpResponse::ServiceUnavailable().json(json!({ "error": "between epochs" }));
    };
    match protocol.send(GetIndexBlocks).await {
        Ok(Some((epoch, blocks))) => {
            let blocks: Vec<_> = blocks
                .iter()
                .map(|(h, t)| json!([h.to_string(), medium(*t)]))
                .collect();
            HttpResponse::Ok().json(json!({ "epoch": epoch.0, "blocks": blocks }))
        }
        Ok(None) => {
            HttpResponse::NotFound().json(json!({ "error": "only rank 0 holds the group index" }))
        }
        Err(e) => HttpResponse::ServiceUnavailable()
            .json(json!({ "error": format!("protocol actor unavailable: {e}") })),
    }
}
