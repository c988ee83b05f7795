//! Prints the expected slowest-GPU factor (`llmsim_compute::variability::slowest_of`) at the
//! default spread and screen for job sizes 8 to 131,072: the table in `bench/kernels.md`.
fn main() {
    use llmsim_compute::variability::{DEFAULT_SCREEN, DEFAULT_SIGMA, slowest_of};
    println!("| GPUs | slowest-GPU factor |\n|---:|---:|");
    for n in [8u64, 64, 128, 512, 1024, 4096, 16_384, 131_072] {
        println!("| {n} | {:.4} |", slowest_of(n, DEFAULT_SIGMA, DEFAULT_SCREEN));
    }
}
