//! What the agent's frame ring publishes (`RankCore::frame_reads`, `RankCore::readable_frame`)
//! is exactly what a `Frame` read is answered with at once, on the leader and on a follower,
//! frame 0 filtered for the rank's engine; and nothing once reads are refused.

mod support;

use std::collections::BTreeSet;

use support::{Group, Spec};
use tandem_core::{EpochStart, FrameReads};
use tandem_proto::engine::EngineReply;
use tandem_proto::{Epoch, OutcomeResult, RequestId, Step, TaskId, TaskKind, TaskOutcome};

#[test]
fn readable_frames_are_the_answers_of_frame_reads_and_none_once_refused() {
    let outcome = |seq| TaskOutcome {
        task: TaskId { epoch: 1, seq },
        kind: TaskKind::Store,
        request: RequestId(seq),
        result: OutcomeResult::Ok,
    };
    let mut spec = Spec::new(2);
    spec.epoch = Epoch(2);
    let start = EpochStart {
        reconciliation: Some(tandem_proto::reconcile(&[outcome(1), outcome(2)], &[])),
        aborted: Vec::new(),
        acknowledged: BTreeSet::from([TaskId { epoch: 1, seq: 1 }]),
    };
    let mut g = Group::new(spec, start);
    // The leader serves no engine before every follower joined: reads are refused.
    assert_eq!(g.nodes[0].core.frame_reads(), FrameReads::Refused);
    g.join_all();
    assert_eq!(
        g.nodes[1].core.frame_reads(),
        FrameReads::Served { readable: None }
    );
    for _ in 0..5 {
        g.step();
    }
    for r in 0..2u32 {
        let core_reads = g.nodes[r as usize].core.frame_reads();
        assert_eq!(
            core_reads,
            FrameReads::Served {
                readable: Some((Step(0), Step(4)))
            },
            "rank {r}"
        );
        for s in 0..5 {
            let published = g.nodes[r as usize].core.readable_frame(Step(s));
            let call = g.frame_call(r, s, 0);
            match g.reply(r, call) {
                Some(EngineReply::Frame(f)) => {
                    assert_eq!(published.as_ref(), Some(&*f), "rank {r} step {s}")
                }
                other => panic!("rank {r} step {s}: {other:?}"),
            }
        }
        // Frame 0 without the redelivery this rank's engine acknowledged.
        let f0 = g.nodes[r as usize].core.readable_frame(Step(0)).unwrap();
        let left: Vec<u64> = f0
            .reconciliation
            .unwrap()
            .redelivered
            .iter()
            .map(|o| o.task.seq)
            .collect();
        assert_eq!(left, vec![2], "rank {r}");
        // Not sealed yet: a read would wait (or be LeaderBehind), so nothing is published.
        assert_eq!(g.nodes[r as usize].core.readable_frame(Step(5)), None);
    }
    // The epoch fails on the follower: reads are refused, nothing is readable.
    g.nodes[1].core.handle_leader_lost("eof", 0);
    g.drive();
    assert_eq!(g.nodes[1].core.frame_reads(), FrameReads::Refused);
    assert_eq!(g.nodes[1].core.readable_frame(Step(0)), None);
}
