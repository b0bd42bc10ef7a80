//! `cargo xtask bench --only …`: which parts of the table to measure, so one figure can
//! be profiled or compared before and after a change without the whole hour.

/// A part of the bench, as `--only` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Unrelated syscalls: a getppid loop's CPU, bare and beside the agent in each Unix
    /// hook mode.
    Syscalls,
    /// Successful connects: the three loops and their bpf_stats bounds.
    HotPath,
    /// The `kfree_skb` hook's cost: delivered UDP datagrams and unrelated drops, by the
    /// hot path's method.
    Datagrams,
    /// Refused connects, TCP then UDS: agent CPU per refusal.
    Refusals,
    /// Node scale: simulated pods, the agent's CPU and RSS.
    Scale,
    /// Start to ready, without and with many more cgroups.
    Startup,
    /// Detection latency of startup races.
    Latency,
    /// A neighbour's refusal storm beside startup races.
    Storm,
}

/// The parts to run: every one unless `--only` named some.
pub struct Parts(Vec<Part>);

impl Parts {
    pub fn only(parts: Vec<Part>) -> Self {
        Parts(parts)
    }

    pub fn has(&self, part: Part) -> bool {
        self.0.is_empty() || self.0.contains(&part)
    }

    /// The `--only` argument as given, for a partial report's header.
    pub fn only_flag(&self) -> Option<String> {
        use clap::ValueEnum;
        let names: Vec<String> = self
            .0
            .iter()
            .filter_map(|p| Some(p.to_possible_value()?.get_name().to_string()))
            .collect();
        (!names.is_empty()).then(|| format!(" --only {}", names.join(",")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_selection_runs_every_part_and_a_selection_only_its_own() {
        assert!(Parts::only(vec![]).has(Part::Storm));
        let some = Parts::only(vec![Part::Refusals, Part::Scale]);
        assert!(some.has(Part::Refusals) && some.has(Part::Scale));
        assert!(!some.has(Part::HotPath) && !some.has(Part::Storm));
        assert_eq!(some.only_flag().as_deref(), Some(" --only refusals,scale"));
        assert_eq!(Parts::only(vec![]).only_flag(), None);
    }
}
