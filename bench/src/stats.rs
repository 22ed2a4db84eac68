//! Timing of interleaved A/B runs and their summary (median, interquartile range).

use std::time::{Duration, Instant};

/// The timings of one contender over every round.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<Duration>);

/// The median and quartiles of some values, in their unit (milliseconds for [`Samples`]).
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
}

impl Samples {
    pub fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    /// In milliseconds.
    pub fn summary(&self) -> Summary {
        let millis: Vec<f64> = self.0.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        Summary::of(&millis)
    }
}

impl Summary {
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            median: quantile(&sorted, 0.5),
            q1: quantile(&sorted, 0.25),
            q3: quantile(&sorted, 0.75),
        }
    }

    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }

    /// `median (IQR)`, as the tables show it.
    pub fn cell(&self) -> String {
        format!(
            "{} ({})",
            crate::report::num(self.median),
            crate::report::num(self.iqr())
        )
    }
}

/// The `q` quantile of sorted values, interpolating linearly between neighbours.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        len => {
            let position = q * (len - 1) as f64;
            let below = position.floor() as usize;
            let above = position.ceil() as usize;
            let weight = position - below as f64;
            sorted[below] * (1.0 - weight) + sorted[above] * weight
        }
    }
}

/// Runs every contender once per round, in an order that rotates each round so that none
/// always goes first (and so always meets a colder cache or a busier machine), and returns
/// each one's samples in the order given.
pub fn interleaved(
    rounds: usize,
    contenders: &mut [&mut dyn FnMut() -> anyhow::Result<()>],
) -> anyhow::Result<Vec<Samples>> {
    let count = contenders.len();
    let mut samples = vec![Samples::default(); count];
    for round in 0..rounds {
        for offset in 0..count {
            let index = (round + offset) % count;
            let started = Instant::now();
            contenders[index]()?;
            samples[index].push(started.elapsed());
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let values = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&values, 0.5), 3.0);
        assert_eq!(quantile(&values, 0.25), 2.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.5), 1.5);
    }
}
