//! The frame ring against its promises: never a torn or stale slot, a new epoch refuses the
//! old one's slots, and whatever the ring cannot answer goes to the socket.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tandem_proto::frame::{Frame, LookupResult};
use tandem_proto::ids::{BlockHash, Epoch, RequestId, Step};

use super::{Geometry, Lookup, RingReader, RingWriter, Waited};

/// The frame the "leader" seals for `(epoch, step)`: its size varies with the step (0 to 40
/// lookups of up to 7 blocks), so slots are rewritten with longer and shorter payloads.
fn sealed(epoch: u64, step: u64) -> Frame {
    let mut f = Frame::empty(Epoch(epoch), Step(step));
    let n = (step.wrapping_mul(2654435761) >> 7) % 41;
    for i in 0..n {
        f.lookups.push(LookupResult {
            request: RequestId(step ^ i),
            block_hashes: (0..(i % 7))
                .map(|b| BlockHash(u128::from(step) << 64 | u128::from(b * 31 + i)))
                .collect(),
            matched_blocks: (i % 3) as u32,
            pinned: i % 2 == 0,
        });
    }
    f
}

fn bytes(f: &Frame) -> Vec<u8> {
    postcard::to_allocvec(f).unwrap()
}

fn reader_of(w: &RingWriter) -> RingReader {
    let fd: OwnedFd = w.fd().as_fd().try_clone_to_owned().unwrap();
    RingReader::map(fd).unwrap()
}

fn small() -> Geometry {
    Geometry::new(8, 4096)
}

#[test]
fn a_racing_reader_never_sees_a_torn_or_stale_slot() {
    // 8 slots, 40,000 steps: every slot is rewritten 5,000 times while two readers copy it out.
    const STEPS: u64 = 40_000;
    let mut w = RingWriter::create("race", small()).unwrap();
    w.reset(7);
    let readers: Vec<RingReader> = (0..2).map(|_| reader_of(&w)).collect();
    let done = Arc::new(AtomicBool::new(false));
    // The writer starts once every reader runs.
    let start = Arc::new(Barrier::new(4));
    let handles: Vec<_> = readers
        .into_iter()
        .enumerate()
        .map(|(k, r)| {
            let (done, start) = (done.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let (mut hits, mut buf, mut i) = (0u64, Vec::new(), 0u64);
                while !done.load(Ordering::Relaxed) {
                    i += 1;
                    // Around the newest step, where the writer is: the slot being rewritten,
                    // its predecessors, and steps not yet published.
                    let latest = r.published_end();
                    let step = (latest + 2).saturating_sub(i % 11 + k as u64);
                    match r.lookup(7, step, &mut buf) {
                        Lookup::Frame => {
                            let f: Frame = postcard::from_bytes(&buf).expect("a whole frame");
                            assert_eq!(f, sealed(7, step), "the frame of step {step}");
                            hits += 1;
                        }
                        Lookup::NotYet => assert!(step + 1 >= latest, "step {step} published"),
                        Lookup::Socket => {}
                    }
                }
                hits
            })
        })
        .collect();
    // A third reader waits for every step in order: each wait ends with that step's frame.
    let ordered = {
        let r = reader_of(&w);
        let start = start.clone();
        std::thread::spawn(move || {
            start.wait();
            let mut buf = Vec::new();
            let mut read = 0u64;
            let mut step = 0;
            while step < STEPS {
                let until = Instant::now() + Duration::from_secs(30);
                match r.wait(7, step, until, &mut buf, || false) {
                    Waited::Frame => {
                        let f: Frame = postcard::from_bytes(&buf).expect("a whole frame");
                        assert_eq!(f, sealed(7, step));
                        read += 1;
                    }
                    // Overwritten before this reader got to it: skip ahead, as a slow engine
                    // asks the socket.
                    Waited::Socket => assert!(r.published_end() > step, "wait gave up early"),
                    Waited::Hangup => unreachable!(),
                }
                step += 1 + step % 3;
            }
            read
        })
    };
    start.wait();
    for step in 0..STEPS {
        assert!(w.publish(7, step, &bytes(&sealed(7, step))));
        if step % 64 == 0 {
            std::thread::yield_now();
        }
    }
    done.store(true, Ordering::Relaxed);
    let hits: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let read = ordered.join().unwrap();
    println!("racing readers took {hits:?} frames, the ordered reader {read}");
    assert!(
        hits.iter().all(|h| *h > 0),
        "every reader read frames: {hits:?}"
    );
    assert!(read > 0);
}

#[test]
fn a_new_epoch_resets_the_ring_and_old_epoch_slots_are_refused() {
    let mut w = RingWriter::create("epochs", small()).unwrap();
    let r = reader_of(&w);
    let mut buf = Vec::new();
    assert_eq!(
        r.lookup(3, 0, &mut buf),
        Lookup::Socket,
        "closed until reset"
    );
    w.reset(3);
    for s in 0..5 {
        w.publish(3, s, &bytes(&sealed(3, s)));
    }
    assert_eq!(r.lookup(3, 4, &mut buf), Lookup::Frame);
    assert_eq!(postcard::from_bytes::<Frame>(&buf).unwrap(), sealed(3, 4));
    assert_eq!(r.lookup(3, 5, &mut buf), Lookup::NotYet);

    w.reset(4);
    assert_eq!(r.epoch(), 4);
    // Every old slot is refused: the old epoch goes to the socket (which says StaleEpoch)...
    for s in 0..5 {
        assert_eq!(r.lookup(3, s, &mut buf), Lookup::Socket, "epoch 3 step {s}");
    }
    // ...and the new epoch has nothing yet, even in the slots the old one filled.
    for s in 0..5 {
        assert_eq!(r.lookup(4, s, &mut buf), Lookup::NotYet, "epoch 4 step {s}");
    }
    w.publish(4, 0, &bytes(&sealed(4, 0)));
    assert_eq!(r.lookup(4, 0, &mut buf), Lookup::Frame);
    assert_eq!(postcard::from_bytes::<Frame>(&buf).unwrap(), sealed(4, 0));
    assert_eq!(r.lookup(3, 0, &mut buf), Lookup::Socket);

    // A slot of the old epoch left in place (not reset) is refused by its own epoch word too.
    w.publish(3, 1, &bytes(&sealed(3, 1)));
    assert_eq!(
        r.lookup(4, 1, &mut buf),
        Lookup::Socket,
        "slot holds epoch 3"
    );

    // Closing an older epoch leaves the ring open for the new one (an old epoch's actor may
    // stop after the new one started).
    w.close(3);
    assert_eq!(r.epoch(), 4);
    // Closed: nothing is read from the ring.
    w.close(4);
    assert_eq!(r.epoch(), 0);
    assert_eq!(r.lookup(4, 0, &mut buf), Lookup::Socket);
}

#[test]
fn what_the_ring_cannot_answer_goes_to_the_socket() {
    let mut w = RingWriter::create("socket", Geometry::new(4, 64)).unwrap();
    let r = reader_of(&w);
    let mut buf = Vec::new();
    w.reset(1);
    // Too big for a slot.
    let big = sealed(1, 9);
    assert!(bytes(&big).len() > 64);
    assert!(!w.publish(1, 0, &bytes(&big)));
    assert_eq!(r.lookup(1, 0, &mut buf), Lookup::Socket);
    // Reused by a later step.
    for s in 1..6 {
        assert!(w.publish(1, s, &bytes(&Frame::empty(Epoch(1), Step(s)))));
    }
    assert_eq!(
        r.lookup(1, 1, &mut buf),
        Lookup::Socket,
        "slot 1 holds step 5"
    );
    assert_eq!(r.lookup(1, 5, &mut buf), Lookup::Frame);
    // Older than the agent retains.
    w.set_oldest(4);
    assert_eq!(r.lookup(1, 3, &mut buf), Lookup::Socket);
    assert_eq!(r.lookup(1, 4, &mut buf), Lookup::Frame);
    // A wait past its deadline hands over to the socket; a hang-up ends it at once.
    let past = Instant::now();
    assert_eq!(r.wait(1, 6, past, &mut buf, || false), Waited::Socket);
    let later = Instant::now() + Duration::from_secs(60);
    assert_eq!(r.wait(1, 6, later, &mut buf, || true), Waited::Hangup);
}

#[test]
fn a_waiting_reader_wakes_with_the_published_frame() {
    let mut w = RingWriter::create("wake", small()).unwrap();
    w.reset(2);
    let r = reader_of(&w);
    let waiter = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let until = Instant::now() + Duration::from_secs(60);
        let got = r.wait(2, 3, until, &mut buf, || false);
        (got, buf)
    });
    for s in 0..4 {
        std::thread::sleep(Duration::from_millis(5));
        w.publish(2, s, &bytes(&sealed(2, s)));
    }
    let (got, buf) = waiter.join().unwrap();
    assert_eq!(got, Waited::Frame);
    assert_eq!(postcard::from_bytes::<Frame>(&buf).unwrap(), sealed(2, 3));
}

#[test]
fn a_descriptor_that_is_not_a_ring_is_refused() {
    let file = tempfile::tempfile().unwrap();
    file.set_len(4096).unwrap();
    let err = RingReader::map(OwnedFd::from(file)).err().expect("refused");
    assert!(err.to_string().contains("layout"), "{err}");
}
