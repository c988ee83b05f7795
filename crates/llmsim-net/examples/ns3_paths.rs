//! Prints each flow's ECMP path of an ns-3 experiment: `cargo run -p llmsim-net --example ns3_paths -- config.txt`.
fn main() {
    let cfg = std::env::args().nth(1).expect("usage: ns3_paths <config.txt>");
    let x = llmsim_net::packet::ns3::Ns3Experiment::load(std::path::Path::new(&cfg), 1).expect("load");
    for (i, p) in llmsim_net::packet::ns3::flow_paths(&x.engine).iter().enumerate() {
        println!("{i}: {p:?}");
    }
}
