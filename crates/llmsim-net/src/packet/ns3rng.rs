//! ns-3's random streams, for reproducing its random ECN marks.
//!
//! ns-3.17 draws every ECN mark (`SwitchMmu::ShouldSendCN`) and every PFC frame's IP id
//! (`QbbNetDevice::SendPfc`) from a fresh `UniformVariable`, which takes the next stream index of
//! a process-wide counter and returns the first output of that stream. Streams are L'Ecuyer's
//! MRG32k3a (a published algorithm): state `seed` in all six words, advanced by
//! `stream * 2^127` and `run * 2^76` steps. Given the counter's value when the first flow starts
//! (it depends on every random variable ns-3 created while building the scenario), the marks
//! follow exactly.

const M1: u64 = 4_294_967_087;
const M2: u64 = 4_294_944_443;
const A12: u64 = 1_403_580;
const A13N: u64 = 810_728;
const A21: u64 = 527_612;
const A23N: u64 = 1_370_589;
const NORM: f64 = 2.328306549295728e-10; // ns-3's 2.328306549295727688e-10, as an f64

type Mat = [[u64; 3]; 3];

fn mat_mul(a: &Mat, b: &Mat, m: u64) -> Mat {
    let mut c = [[0u64; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            let mut s = 0u128;
            for k in 0..3 {
                s += u128::from(a[i][k]) * u128::from(b[k][j]);
            }
            c[i][j] = (s % u128::from(m)) as u64;
        }
    }
    c
}

fn mat_vec(a: &Mat, v: &[u64; 3], m: u64) -> [u64; 3] {
    let mut r = [0u64; 3];
    for i in 0..3 {
        let mut s = 0u128;
        for k in 0..3 {
            s += u128::from(a[i][k]) * u128::from(v[k]);
        }
        r[i] = (s % u128::from(m)) as u64;
    }
    r
}

/// `a^(2^e)` by squaring.
fn pow2(a: &Mat, e: u32, m: u64) -> Mat {
    let mut x = *a;
    for _ in 0..e {
        x = mat_mul(&x, &x, m);
    }
    x
}

fn pow(a: &Mat, mut n: u64, m: u64) -> Mat {
    let mut r = [[1, 0, 0], [0, 1, 0], [0, 0, 1]];
    let mut x = *a;
    while n > 0 {
        if n & 1 == 1 {
            r = mat_mul(&r, &x, m);
        }
        x = mat_mul(&x, &x, m);
        n >>= 1;
    }
    r
}

/// The sequence of fresh ns-3 streams, from a given stream index on.
#[derive(Clone, Debug)]
pub(crate) struct Ns3Streams {
    /// Start of the current stream (`A^(n * 2^127) * seed`), both components.
    s1: [u64; 3],
    s2: [u64; 3],
    next1: Mat,
    next2: Mat,
    sub1: Mat,
    sub2: Mat,
    /// Index of the next stream.
    pub index: u64,
}

impl Ns3Streams {
    /// Streams of seed `seed` and run `run` (ns-3's defaults: 1 and 1), starting at `index`.
    pub fn new(seed: u64, run: u64, index: u64) -> Self {
        let a1: Mat = [[0, 1, 0], [0, 0, 1], [M1 - A13N, A12, 0]];
        let a2: Mat = [[0, 1, 0], [0, 0, 1], [M2 - A23N, 0, A21]];
        let next1 = pow2(&a1, 127, M1);
        let next2 = pow2(&a2, 127, M2);
        let sub1 = pow(&pow2(&a1, 76, M1), run, M1);
        let sub2 = pow(&pow2(&a2, 76, M2), run, M2);
        let s = [seed % M1; 3];
        let t = [seed % M2; 3];
        Ns3Streams {
            s1: mat_vec(&pow(&next1, index, M1), &s, M1),
            s2: mat_vec(&pow(&next2, index, M2), &t, M2),
            next1,
            next2,
            sub1,
            sub2,
            index,
        }
    }

    /// Takes the next stream and returns its first `RandU01` output.
    pub fn next_u01(&mut self) -> f64 {
        let x = mat_vec(&self.sub1, &self.s1, M1);
        let y = mat_vec(&self.sub2, &self.s2, M2);
        self.skip();
        // RngStream::RandU01, one step.
        let p1 = (u128::from(A12) * u128::from(x[1]) + u128::from(M1 - A13N) * u128::from(x[0])) % u128::from(M1);
        let p2 = (u128::from(A21) * u128::from(y[2]) + u128::from(M2 - A23N) * u128::from(y[0])) % u128::from(M2);
        let (p1, p2) = (p1 as f64, p2 as f64);
        if p1 > p2 { (p1 - p2) * NORM } else { (p1 - p2 + M1 as f64) * NORM }
    }

    /// Takes the next stream without drawing from it.
    pub fn skip(&mut self) {
        self.s1 = mat_vec(&self.next1, &self.s1, M1);
        self.s2 = mat_vec(&self.next2, &self.s2, M2);
        self.index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_zero_matches_mrg32k3a_from_a_plain_seed() {
        // Stream 0, substream 0 of seed 12345 is the generator started at state 12345 x 6;
        // check the jump arithmetic against direct stepping: stream 0, run 1 is 2^76 steps
        // ahead, which we cannot step, but run 0 of stream 0 is the seed itself.
        let mut s = Ns3Streams::new(12345, 0, 0);
        let u = s.next_u01();
        // One MRG32k3a step from (12345 x 6), computed by hand from the recurrences.
        let p1 = (A12 as i128 * 12345 - A13N as i128 * 12345).rem_euclid(M1 as i128) as f64;
        let p2 = (A21 as i128 * 12345 - A23N as i128 * 12345).rem_euclid(M2 as i128) as f64;
        let want = if p1 > p2 { (p1 - p2) * NORM } else { (p1 - p2 + M1 as f64) * NORM };
        assert_eq!(u, want);
        // Consecutive streams differ and indices advance.
        let mut t = Ns3Streams::new(1, 1, 7);
        let (a, b) = (t.next_u01(), t.next_u01());
        assert!(a != b && (0.0..1.0).contains(&a) && (0.0..1.0).contains(&b));
        assert_eq!(t.index, 9);
        // Jumping to index 9 directly gives the same stream as stepping there.
        let mut d = Ns3Streams::new(1, 1, 9);
        let mut e = Ns3Streams::new(1, 1, 7);
        e.skip();
        e.skip();
        assert_eq!(d.next_u01(), e.next_u01());
    }
}
