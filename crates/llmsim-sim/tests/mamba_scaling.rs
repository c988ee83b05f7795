//! The Mamba-2 SSD scan across GPU generations (`llmsim_compute::ssd`): its Triton kernels are
//! bound by their SMs' rate, not by HBM, so a Blackwell GPU does not run them faster by its
//! bandwidth. Checked against published training throughput of a pure Mamba-2 model on three GPUs
//! (ratios only: the model, batch and software are the same on each).

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, simulate};

/// state-spaces/mamba issue #904 (2026-04-06), "Training throughput" table: a pure Mamba-2 model
/// of d_model 2048 and 48 layers (the 1.4B configuration: expand 2, head dim 64, state 128, one
/// group, chunk 256, GPT-NeoX vocabulary padded to 50,288), batch 4 x 4,096 tokens, BF16,
/// mamba_ssm's Triton SSD, one GPU; Mamba2 TFLOP/s on A100 / H200 / GB200.
const PUBLISHED_TFLOPS: [(&str, f64); 3] = [("A100", 102.5), ("H200", 239.2), ("GB200", 360.4)];

fn tokens_per_s(gpu: &str) -> f64 {
    let yaml = format!(
        "
model:
  name: mamba2-1.4b
  hidden_size: 2048
  num_hidden_layers: 48
  hybrid_override_pattern: \"{}\"
  num_attention_heads: 16
  intermediate_size: 8192
  vocab_size: 50288
  gated_mlp: false
  tie_word_embeddings: true
  position_embedding_type: none
  mamba: {{ num_heads: 64, head_dim: 64, state_size: 128, n_groups: 1, conv_kernel: 4, chunk_size: 256 }}
training: {{ seq_length: 4096, micro_batch_size: 4, global_batch_size: 4, dtype: bf16, recompute: none }}
parallel: {{ tp: 1, pp: 1 }}
cluster: {{ gpu: {gpu}, gpus: 1, gpus_per_node: 1, topology: {{ kind: flat }} }}
output: {{ flows: false }}
",
        "M".repeat(48)
    );
    let s = Scenario::from_yaml(&yaml, &[], Path::new(".")).expect("valid scenario");
    let out = simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs");
    out.report.tokens_per_s.expect("a transformer run counts tokens")
}

/// llmsim's speed-ups between the GPUs are within 10% of the published ones. With the SSD timed
/// by its bandwidth fraction alone they were 2.68 (H200/A100, published 2.33: +15%) and 1.96
/// (GB200/H200, published 1.51: +30%); with the SM-rate bound, 2.40 and 1.65; with the SSD
/// backward at its own measured fraction (`llmsim_compute::ssd::BWD_MEMORY_EFF`), 2.24 and 1.49.
#[test]
fn mamba2_speedups_across_generations_follow_the_sms_not_the_bandwidth() {
    let llmsim: Vec<f64> = PUBLISHED_TFLOPS.iter().map(|(g, _)| tokens_per_s(g)).collect();
    for w in [0, 1] {
        let (lo, hi) = (PUBLISHED_TFLOPS[w], PUBLISHED_TFLOPS[w + 1]);
        let published = hi.1 / lo.1;
        let ours = llmsim[w + 1] / llmsim[w];
        assert!(
            (ours / published - 1.0).abs() < 0.10,
            "{}/{}: llmsim {ours:.3}, published {published:.3}",
            hi.0,
            lo.0
        );
    }
}
