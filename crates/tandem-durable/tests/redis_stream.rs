//! What only a real Redis can show about [`RedisLog`]: a lost epoch counter, and entries
//! written by something else. Everything both implementations promise is in the contract
//! suite (`tests/contract/`), which runs against a real redis-server as well.

use tandem_durable::{CompletionStream, DurableConfig, DurableError, EpochStore, RedisLog};
use tandem_proto::{Epoch, Rank};
use tandem_tests::redis::RedisServer;

async fn log(server: &RedisServer, world_size: u32) -> RedisLog {
    RedisLog::connect(&DurableConfig::new(server.url(), "g1", world_size))
        .await
        .expect("connect")
}

#[tokio::test]
async fn next_epoch_never_repeats_when_the_counter_was_lost() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    for _ in 0..3 {
        log.next_epoch().await.unwrap();
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&log.keys().epoch)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(0));
    assert_eq!(log.next_epoch().await.unwrap(), Epoch(4));
    assert_eq!(log.current_epoch().await.unwrap(), Epoch(4));
}

#[tokio::test]
async fn foreign_entries_are_reported_corrupt() {
    let server = RedisServer::start();
    let log = log(&server, 1).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let id: String = redis::cmd("XADD")
        .arg(&log.keys().completions)
        .arg("*")
        .arg("v")
        .arg("9")
        .arg("rec")
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    let err = log.read_new(Rank(0), 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("stored value {id} is corrupt: unknown record version 9 (this build reads 2)")
    );
    assert!(matches!(
        log.recover().await,
        Err(DurableError::Corrupt { .. })
    ));
}
