//! Min / median / max of repeated measurements: figures from a shared machine are
//! noisy, so every row shows its spread.

#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no samples.
    pub fn of(samples: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            min: v[0],
            median: v[v.len() / 2],
            max: v[v.len() - 1],
        })
    }

    /// `min / median / max` with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        format!(
            "{:.d$} / **{:.d$}** / {:.d$}",
            self.min,
            self.median,
            self.max,
            d = digits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_samples() {
        let s = Spread::of(&[3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        assert!(Spread::of(&[]).is_none());
        assert_eq!(s.show(1), "1.0 / **2.0** / 3.0");
    }
}
