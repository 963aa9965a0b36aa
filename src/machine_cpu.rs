//! The whole machine's CPU time, for the benchmarks: their rates moved by a
//! third from one hour to the next on the same build, and the CPU a unit of
//! work took (and the time the hypervisor stole) says whether the machine or
//! the code changed.

/// CPU time from `/proc/stat`'s `cpu` line, in clock ticks (10 ms: USER_HZ
/// is 100 on Linux).
#[derive(Debug, Clone, Copy)]
pub struct MachineCpu {
    /// User, nice, system, irq and softirq.
    pub busy: u64,
    /// Stolen by the hypervisor.
    pub steal: u64,
    /// All of it, idle and iowait included.
    pub all: u64,
}

impl MachineCpu {
    /// The machine's CPU time so far; none where there is no `/proc/stat`.
    pub fn now() -> Option<MachineCpu> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal
        Some(MachineCpu {
            busy: [0, 1, 2, 5, 6].iter().filter_map(|&i| fields.get(i)).sum(),
            steal: fields.get(7).copied().unwrap_or(0),
            all: fields.iter().take(8).sum(),
        })
    }

    /// The time spent since `earlier`, read with [`MachineCpu::now`].
    pub fn since(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy.saturating_sub(earlier.busy),
            steal: self.steal.saturating_sub(earlier.steal),
            all: self.all.saturating_sub(earlier.all),
        }
    }

    /// Busy milliseconds per 1,000 of `units` of work.
    pub fn busy_ms_per_1000(self, units: usize) -> f64 {
        self.busy as f64 * 10.0 * 1000.0 / units.max(1) as f64
    }

    /// The stolen share of the time, in per cent.
    pub fn steal_percent(self) -> f64 {
        self.steal as f64 * 100.0 / self.all.max(1) as f64
    }
}
