//! The link over real loopback TCP: order under back-pressure, the queue written after the
//! handles are gone, and a failed write reported once.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use super::PeerLink;

/// A connected pair: the link's write half and the far end.
async fn pair() -> (tokio::net::tcp::OwnedWriteHalf, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (near, far) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (_read, write) = near.unwrap().into_split();
    // The read half is dropped: a TCP stream split in two stays open until both are gone, and
    // the write half alone keeps it.
    (write, far.unwrap().0)
}

/// Message `i`: 64 KiB of bytes that name `i`, so that a reordering or a gap shows.
fn message(i: u32) -> Arc<Vec<u8>> {
    let mut bytes = Vec::with_capacity(64 * 1024);
    while bytes.len() < 64 * 1024 {
        bytes.extend_from_slice(&i.to_le_bytes());
    }
    Arc::new(bytes)
}

#[actix_rt::test]
async fn bytes_arrive_in_order_when_the_socket_blocks_and_after_the_link_is_dropped() {
    let (write, mut far) = pair().await;
    let closed = Rc::new(RefCell::new(Vec::<String>::new()));
    let seen = closed.clone();
    let link = PeerLink::spawn(write, usize::MAX, move |r| seen.borrow_mut().push(r));
    // 64 MiB, written while nobody reads: far more than loopback socket buffers hold, so most
    // of it is queued behind bytes the socket did not take.
    let count = 1024u32;
    for i in 0..count {
        link.send_encoded(&message(i));
    }
    assert!(
        !link.handle.shared.state().queue.is_empty(),
        "the far end read nothing, yet nothing was queued"
    );
    // Make room at the far end and let the runtime turn: a message sent then still arrives
    // after everything sent before it.
    let mut got = vec![0u8; 1 << 20];
    far.read_exact(&mut got).await.unwrap();
    tokio::task::yield_now().await;
    link.send_encoded(&message(count));
    drop(link);
    far.read_to_end(&mut got).await.unwrap();
    assert_eq!(
        got.len(),
        (count as usize + 1) * 64 * 1024,
        "bytes lost or added"
    );
    for (i, chunk) in got.chunks(64 * 1024).enumerate() {
        assert_eq!(chunk, &message(i as u32)[..], "message {i} out of order");
    }
    assert!(closed.borrow().is_empty(), "closed: {:?}", closed.borrow());
}

#[actix_rt::test]
async fn a_failed_write_is_reported_once_and_later_messages_are_dropped() {
    let (write, far) = pair().await;
    let closed = Rc::new(RefCell::new(Vec::<String>::new()));
    let seen = closed.clone();
    let link = PeerLink::spawn(write, usize::MAX, move |r| seen.borrow_mut().push(r));
    // Unread bytes at the far end make its close a reset: the near end's writes then fail.
    link.send_encoded(&message(0));
    drop(far);
    let mut tries = 0;
    while closed.borrow().is_empty() && tries < 10_000 {
        link.send_encoded(&message(1));
        tokio::task::yield_now().await;
        tries += 1;
    }
    for _ in 0..100 {
        link.send_encoded(&message(2));
        tokio::task::yield_now().await;
    }
    let closed = closed.borrow();
    assert_eq!(closed.len(), 1, "reports: {closed:?}");
    assert!(closed[0].starts_with("write failed"), "{}", closed[0]);
    let state = link.handle.shared.state();
    assert!(state.failed.is_some());
}
