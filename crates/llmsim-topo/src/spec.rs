//! The user-facing topology spec (YAML / JSON), its defaults and `build`.
//!
//! Defaults are those of a current 400G RoCE/InfiniBand AI fabric (ConnectX-7 class NICs,
//! 64-port 400G switches, DGX SuperPOD-like scalable units):
//! - host NIC link: **400Gbps, 500ns** (NIC + DAC/short optics + first switch port);
//! - switch-to-switch link: **400Gbps, 600ns** (switch pipeline + up to ~30 m of fiber).

use std::path::PathBuf;

use llmsim_core::{Bandwidth, FieldError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::FamilySpec;
use crate::generators::{self, FatTreeParams, RailFatTreeParams, SpineLeafParams};
use crate::graph::{ScaleUp, Topology};
pub(crate) use crate::link_spec::spine_count;

pub use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec};

/// Declares [`TopologySpec`] with its one-file families listed once: the variant (serde kind,
/// schema, docs, CLI help via [`kinds`]) and [`TopologySpec::family`], through which `build`
/// builds it. Registering a family is its line in `families { .. }` (and `pub mod` in `lib.rs`).
macro_rules! topology_spec {
    (
        $(#[$meta:meta])*
        pub enum TopologySpec {
            { $($head:tt)* }
            families { $( $(#[$fmeta:meta])* $fam:ident($spec:ty), )* }
            { $($tail:tt)* }
        }
    ) => {
        $(#[$meta])*
        pub enum TopologySpec {
            $($head)*
            $( $(#[$fmeta])* $fam($spec), )*
            $($tail)*
        }

        impl TopologySpec {
            /// The one-file family ([`FamilySpec`]) this spec names; `None` for the built-in
            /// kinds (flat, fat-tree, spine-leaf, rail-fat-tree, ns3).
            pub fn family(&self) -> Option<&dyn FamilySpec> {
                match self {
                    $( TopologySpec::$fam(s) => Some(s), )*
                    _ => None,
                }
            }
        }
    };
}

topology_spec! {
/// Which network the GPUs sit on. `kind` picks the generator.
///
/// ```yaml
/// topology: { kind: rail-fat-tree, servers_per_segment: 16, dual_plane: true }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
#[schemars(transform = kind_aliases)]
pub enum TopologySpec {
    {
    /// One switch holding every GPU's NIC.
    Flat {
        /// Default 400Gbps / 500ns.
        #[serde(default)]
        nic: LinkSpec,
    },
    /// k-ary three-tier fat-tree.
    FatTree {
        /// Switch radix, even. Default: the smallest even k whose k^3/4 hosts hold the GPUs.
        #[serde(default)]
        k: Option<u32>,
        /// Host <-> edge. Default 400Gbps / 500ns.
        #[serde(default)]
        host_link: LinkSpec,
        /// Edge <-> aggregation. Default 400Gbps / 600ns.
        #[serde(default)]
        edge_agg: LinkSpec,
        /// Aggregation <-> core. Default 400Gbps / 600ns.
        #[serde(default)]
        agg_core: LinkSpec,
        /// Two fat-tree planes, each GPU NIC with two ports of half `host_link`'s bandwidth, one
        /// on an edge switch of each (Alibaba HPN's dual-ToR, dual-plane): an edge switch down
        /// leaves every GPU reachable. Twice the switches, each still of radix k; the same graph
        /// as `kind: clos` with `dual_tor` on the fat-tree's tiers. Default false.
        #[serde(default)]
        dual_tor: bool,
    },
    /// Two-tier leaf-spine Clos.
    SpineLeaf {
        /// Default 32 (a 64-port leaf, half down, half up).
        #[serde(default = "default_hosts_per_leaf")]
        hosts_per_leaf: u32,
        /// Default: as many as the GPUs need.
        #[serde(default)]
        leaves: Option<u32>,
        /// Spine count. Give this or `oversubscription`, not both; default: non-blocking (1:1).
        #[serde(default)]
        spines: Option<u32>,
        /// Leaf downlink / uplink capacity, e.g. 3.0 for 3:1; sets the spine count.
        #[serde(default)]
        oversubscription: Option<f64>,
        /// Default 400Gbps / 500ns.
        #[serde(default)]
        nic: LinkSpec,
        /// Leaf <-> spine. Default 400Gbps / 600ns.
        #[serde(default)]
        uplink: LinkSpec,
    },
    /// Rail-optimized fabric (DGX SuperPOD, Alibaba HPN, Spectrum-X): NIC `r` of every server of
    /// a segment goes to that segment's rail-`r` leaf. Segments come from the GPU count.
    #[serde(alias = "rail-optimized")]
    RailFatTree {
        /// Servers per segment. Default 32 (a DGX H100 SuperPOD scalable unit).
        #[serde(default = "default_servers_per_segment")]
        servers_per_segment: u32,
        /// Spines per plane. Give this or `oversubscription`, not both; default non-blocking.
        #[serde(default)]
        spines: Option<u32>,
        /// Leaf downlink / uplink capacity, e.g. 2.0 for 2:1; sets the spine count. Give this or
        /// `spines`, not both; default 1.0 (non-blocking).
        #[serde(default)]
        oversubscription: Option<f64>,
        /// NIC bandwidth per GPU (both planes together). Default 400Gbps / 500ns.
        #[serde(default)]
        nic: LinkSpec,
        /// Leaf <-> spine. Default 400Gbps / 600ns.
        #[serde(default)]
        uplink: LinkSpec,
        /// Two independent planes (HPN / Spectrum-X dual-plane). Default false.
        #[serde(default)]
        dual_plane: bool,
        /// Bandwidth of one NIC port in dual-plane mode. Default half the NIC bandwidth.
        #[serde(default)]
        plane_bandwidth: Option<Bandwidth>,
        /// Two leaves per rail and segment, each GPU NIC with two ports of half its bandwidth, one
        /// on each, both leaves cabled to every spine (Alibaba HPN's dual-ToR): a leaf down leaves
        /// every GPU reachable. The same graph as a one-pod `three-tier` with `dual_tor`. With
        /// `dual_plane` the NIC's two ports are already on two leaves, one per plane, and this
        /// adds nothing. Default false.
        #[serde(default)]
        dual_tor: bool,
    },
    }
    families {
    /// 2-D / 3-D torus with wrap-around, dimension-order routing ([`crate::torus`]).
    Torus(crate::torus::TorusSpec),
    /// Dragonfly: groups of fully meshed routers joined by global links; minimal, Valiant or
    /// UGAL routing.
    Dragonfly(crate::dragonfly::DragonflySpec),
    /// Rail-only: a network per rail, no spine across rails; cross-rail traffic via NVLink.
    RailOnly(crate::rail_only::RailOnlySpec),
    /// n-D full mesh (UB-Mesh style): every router cabled to every other of its line in each
    /// dimension; minimal routing, one hop per dimension.
    #[serde(alias = "ub-mesh")]
    FullMesh(crate::full_mesh::FullMeshSpec),
    /// Three-tier Clos with pods: rail-optimized pods (leaves, pod spines) joined by a core layer.
    ThreeTier(crate::three_tier::ThreeTierSpec),
    /// BCube(n, k): server-centric, GPUs with k + 1 NIC ports relay between levels of n-port
    /// switches; digit-correcting routing. Analytical and flow backends only.
    Bcube(crate::bcube::BCubeSpec),
    /// An N-tier Clos declared tier by tier (radix or down/up ports, oversubscription, links).
    Clos(crate::clos::ClosSpec),
    }
    {
    /// An ns-3 topology file (plain or SimAI format), routed by BFS shortest-path ECMP.
    Ns3 {
        /// Path to the file, relative to the working directory.
        path: PathBuf,
    },
    }
}
}

// serde's alias, which schemars does not see (see `llmsim_core::schema`).
fn kind_aliases(s: &mut schemars::Schema) {
    llmsim_core::schema::add_tag_aliases(s, "kind", &[("rail-optimized", "rail-fat-tree"), ("ub-mesh", "full-mesh")]);
}

/// Every `topology.kind` (and `--topology`) name with its aliases, in declaration order, read
/// from the spec's JSON schema: `["flat", "fat-tree", ..., "rail-fat-tree (alias rail-optimized)",
/// ...]`. A new variant of [`TopologySpec`] appears here, in the CLI's help and in the docs
/// without another registration line.
pub fn kinds() -> Vec<String> {
    let schema = schemars::schema_for!(TopologySpec);
    let mut out = Vec::new();
    for key in ["oneOf", "anyOf"] {
        for entry in schema.get(key).and_then(|v| v.as_array()).into_iter().flatten() {
            let Some(t) = entry.pointer("/properties/kind") else {
                continue;
            };
            if let Some(name) = t.get("const").and_then(|v| v.as_str()) {
                out.push(name.to_string());
            } else if let Some(names) = t.get("enum").and_then(|v| v.as_array()) {
                let names: Vec<&str> = names.iter().filter_map(|v| v.as_str()).collect();
                if let Some((first, rest)) = names.split_first() {
                    out.push(if rest.is_empty() {
                        first.to_string()
                    } else {
                        format!("{first} (alias {})", rest.join(", "))
                    });
                }
            }
        }
    }
    out
}

fn default_hosts_per_leaf() -> u32 {
    32
}
fn default_servers_per_segment() -> u32 {
    32
}

impl Default for TopologySpec {
    /// A non-blocking rail-optimized fabric, the common choice for LLM training clusters.
    fn default() -> Self {
        TopologySpec::RailFatTree {
            servers_per_segment: default_servers_per_segment(),
            spines: None,
            oversubscription: None,
            nic: LinkSpec::default(),
            uplink: LinkSpec::default(),
            dual_plane: false,
            plane_bandwidth: None,
            dual_tor: false,
        }
    }
}

impl TopologySpec {
    /// Builds the topology for `gpus` GPUs, picking the smallest instance that holds them where
    /// the spec does not fix the size.
    ///
    /// # Errors
    /// `TopoError::Invalid` naming the field and the fix (odd or too small `k`, GPUs not a multiple
    /// of `gpus_per_server`, zero bandwidth, both `spines` and `oversubscription`, more GPUs than
    /// an ns-3 file has hosts); `TopoError::Parse` for an ns-3 file that does not parse.
    pub fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        match self {
            TopologySpec::Flat { nic } => generators::flat(gpus, nic.resolve(DEFAULT_NIC), scale_up, seed),
            TopologySpec::FatTree {
                k,
                host_link,
                edge_agg,
                agg_core,
                dual_tor,
            } => {
                let k = k.unwrap_or_else(|| generators::smallest_fat_tree_k(gpus.min(generators::MAX_HOSTS)));
                let p = FatTreeParams {
                    k,
                    host_link: host_link.resolve(DEFAULT_NIC),
                    edge_agg: edge_agg.resolve(DEFAULT_FABRIC),
                    agg_core: agg_core.resolve(DEFAULT_FABRIC),
                };
                if *dual_tor {
                    generators::fat_tree_dual_tor(gpus, &p, scale_up, seed)
                } else {
                    generators::fat_tree(gpus, &p, scale_up, seed)
                }
            }
            TopologySpec::SpineLeaf {
                hosts_per_leaf,
                leaves,
                spines,
                oversubscription,
                nic,
                uplink,
            } => {
                let p = SpineLeafParams {
                    hosts_per_leaf: *hosts_per_leaf,
                    leaves: *leaves,
                    spines: spine_count(*spines, *oversubscription)?,
                    nic: nic.resolve(DEFAULT_NIC),
                    uplink: uplink.resolve(DEFAULT_FABRIC),
                };
                generators::spine_leaf(gpus, &p, scale_up, seed)
            }
            TopologySpec::RailFatTree {
                servers_per_segment,
                spines,
                oversubscription,
                nic,
                uplink,
                dual_plane,
                plane_bandwidth,
                dual_tor,
            } => {
                let p = RailFatTreeParams {
                    servers_per_segment: *servers_per_segment,
                    spines: spine_count(*spines, *oversubscription)?,
                    nic: nic.resolve(DEFAULT_NIC),
                    uplink: uplink.resolve(DEFAULT_FABRIC),
                    dual_plane: *dual_plane,
                    plane_bandwidth: *plane_bandwidth,
                };
                if *dual_tor && !*dual_plane {
                    generators::rail_fat_tree_dual_tor(gpus, &p, scale_up, seed)
                } else {
                    generators::rail_fat_tree(gpus, &p, scale_up, seed)
                }
            }
            TopologySpec::Ns3 { path } => {
                let t = crate::ns3::read_ns3(path, seed)?.topology;
                if gpus > t.num_hosts() {
                    return Err(FieldError::new(
                        "gpus",
                        format!(
                            "{} has {} hosts, fewer than {gpus} GPUs; use at most {} GPUs or a bigger topology",
                            path.display(),
                            t.num_hosts(),
                            t.num_hosts()
                        ),
                    )
                    .into());
                }
                Ok(t)
            }
            other => match other.family() {
                Some(f) => f.build(gpus, scale_up, seed),
                None => Err(FieldError::new("topology.kind", "has no generator").into()),
            },
        }
    }
}
