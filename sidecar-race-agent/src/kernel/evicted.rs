//! Evictions from a kernel LRU table, told from counts: the kernel cannot see an
//! eviction where it happens, but it counts the entries it makes and those it uses
//! and removes; what was made, not used and is no longer in the table was evicted.

/// One reading of a table.
#[derive(Debug, Clone, Copy)]
pub struct Made {
    /// Entries the programs made (an entry replaced under its own key counts: it was
    /// dropped unused).
    pub made: u64,
    /// Entries in the table when it was walked.
    pub left: u64,
    /// Entries the programs used and removed.
    pub used: u64,
}

/// The evictions reported so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct Evicted(u64);

impl Evicted {
    /// The evictions given a new reading. Read in the order `made`, `left`, `used`,
    /// an entry made or used during the reading can only make it too low, never too
    /// high; so the highest reading so far is the count, and a counter never goes
    /// back.
    pub fn update(&mut self, reading: Made) -> u64 {
        let now = reading
            .made
            .saturating_sub(reading.left)
            .saturating_sub(reading.used);
        self.0 = self.0.max(now);
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_made_unused_and_is_no_longer_in_the_table_was_evicted() {
        let mut e = Evicted::default();
        // 4,096 entries fit; 5,000 made, 400 used: 504 evicted.
        let full = Made {
            made: 5_000,
            left: 4_096,
            used: 400,
        };
        assert_eq!(e.update(full), 504);
    }

    #[test]
    fn a_table_that_never_filled_reports_no_eviction() {
        let mut e = Evicted::default();
        let reading = Made {
            made: 300,
            left: 120,
            used: 180,
        };
        assert_eq!(e.update(reading), 0);
    }

    #[test]
    fn a_reading_taken_while_entries_come_and_go_does_not_take_the_count_back() {
        let mut e = Evicted::default();
        let first = Made {
            made: 1_000,
            left: 900,
            used: 0,
        };
        assert_eq!(e.update(first), 100);
        // Entries made after `made` was read are in `left`: too low, ignored.
        let during = Made {
            made: 1_000,
            left: 950,
            used: 0,
        };
        assert_eq!(e.update(during), 100);
        let later = Made {
            made: 1_200,
            left: 900,
            used: 150,
        };
        assert_eq!(e.update(later), 150);
    }
}
