//! What one seed's run came to, and the figures over many seeds.
//!
//! Owns [`SeedReport`] and [`Totals`]. Plain counters; nothing here decides.

/// One seed's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Ranks in the group (drawn).
    pub world: u32,
    /// Events carried out (timers and scheduled events).
    pub events: u64,
    /// Faults injected.
    pub faults: u64,
    /// Faults that acted later (a duplicated message, a refused append).
    pub faults_fired: u64,
    /// The epoch the group ended in.
    pub epochs: u64,
    /// Restarts of the whole group the supervisor carried out.
    pub group_restarts: u64,
    /// Ranks' protocol restarts (a running epoch loop moving to a new epoch).
    pub rank_restarts: u64,
    /// Epoch failures the cores reported.
    pub epoch_failures: u64,
    /// Frames sealed.
    pub frames_sealed: u64,
    /// Stores and loads the leader's engine had taken.
    pub tasks_requested: u64,
    /// Tasks whose outcome reached some engine.
    pub outcomes: u64,
    /// Outcomes an engine saw again after acknowledging them (dropped by its task map).
    pub duplicates: u64,
    /// Outcomes an engine saw again before acknowledging them (dropped by its task map).
    pub redelivered: u64,
    /// Tasks requested that never started (settled at a later frame 0).
    pub not_started: u64,
    /// The most appends the leader had out at once.
    pub max_appends_out: u64,
    /// Refused appends answered while later appends were out (a refusal in the middle of the
    /// pipeline).
    pub pipelined_refusals: u64,
    /// Whether the end-of-run block agreement (rule 7) could be checked (every rank in the
    /// leader's epoch holding every sealed frame).
    pub blocks_checked: bool,
}

/// Figures summed over seeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that broke an invariant.
    pub failed: u64,
    /// The sum of every seed's figures (`seed`, `world` and `blocks_checked` unused;
    /// `max_appends_out` is the largest).
    pub sum: SeedReport,
    /// Seeds whose end-of-run block agreement was checked.
    pub blocks_checked: u64,
}

impl Totals {
    /// Adds one seed.
    pub fn add(&mut self, r: &SeedReport, failed: bool) {
        self.seeds += 1;
        self.failed += u64::from(failed);
        let s = &mut self.sum;
        s.events += r.events;
        s.faults += r.faults;
        s.faults_fired += r.faults_fired;
        s.epochs += r.epochs;
        s.group_restarts += r.group_restarts;
        s.rank_restarts += r.rank_restarts;
        s.epoch_failures += r.epoch_failures;
        s.frames_sealed += r.frames_sealed;
        s.tasks_requested += r.tasks_requested;
        s.outcomes += r.outcomes;
        s.duplicates += r.duplicates;
        s.redelivered += r.redelivered;
        s.not_started += r.not_started;
        s.max_appends_out = s.max_appends_out.max(r.max_appends_out);
        s.pipelined_refusals += r.pipelined_refusals;
        self.blocks_checked += u64::from(r.blocks_checked);
    }

    /// Per-seed means, one line each, for printing.
    pub fn lines(&self) -> Vec<String> {
        let n = self.seeds.max(1) as f64;
        let s = &self.sum;
        let per = |x: u64| x as f64 / n;
        vec![
            format!("seeds                {}", self.seeds),
            format!("seeds failed         {}", self.failed),
            format!("events per seed      {:.0}", per(s.events)),
            format!("faults per seed      {:.2}", per(s.faults)),
            format!("group restarts/seed  {:.2}", per(s.group_restarts)),
            format!("frames per seed      {:.0}", per(s.frames_sealed)),
            format!("tasks per seed       {:.1}", per(s.tasks_requested)),
            format!("outcomes per seed    {:.1}", per(s.outcomes)),
            format!(
                "redelivered (total)  {} unacked, {} after an ack",
                s.redelivered, s.duplicates
            ),
            format!("never started (total) {}", s.not_started),
            format!("blocks checked       {} seeds", self.blocks_checked),
            format!(
                "appends out at once  at most {}; {} refused with later ones out (total)",
                s.max_appends_out, s.pipelined_refusals
            ),
        ]
    }
}
