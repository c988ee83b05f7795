//! Chakra execution-trace messages, written from the field numbers of MLCommons Chakra's
//! `schema/protobuf/et_def.proto` (package `ChakraProtoMsg`, as shipped in the `mlc-chakra` 1.0.0
//! wheel, Apache-2.0). Only the fields llmsim reads or writes are declared; protobuf skips the
//! others (the list-valued attributes among them) as unknown fields.

/// `message AttributeProto { string name = 1; string doc_string = 2; oneof value { ... } }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// Chakra `AttributeProto.name`: the attribute's name, e.g. "comm_size".
    #[prost(string, tag = "1")]
    pub name: String,
    /// Chakra `AttributeProto.doc_string`: a free-text description.
    #[prost(string, tag = "2")]
    pub doc_string: String,
    /// Chakra `AttributeProto.value`: the value; `None` when unset or of a list kind not declared here.
    #[prost(oneof = "AttrValue", tags = "3, 5, 7, 9, 10, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29")]
    pub value: Option<AttrValue>,
}

/// The scalar members of `AttributeProto.value` (and `int64_list`, which llmsim writes).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AttrValue {
    /// Chakra `double_val`.
    #[prost(double, tag = "3")]
    DoubleVal(f64),
    /// Chakra `float_val`.
    #[prost(float, tag = "5")]
    FloatVal(f32),
    /// Chakra `int32_val`.
    #[prost(int32, tag = "7")]
    Int32Val(i32),
    /// Chakra `int64_val`.
    #[prost(int64, tag = "9")]
    Int64Val(i64),
    /// Chakra `int64_list`.
    #[prost(message, tag = "10")]
    Int64List(Int64List),
    /// Chakra `uint32_val`.
    #[prost(uint32, tag = "11")]
    Uint32Val(u32),
    /// Chakra `uint64_val`.
    #[prost(uint64, tag = "13")]
    Uint64Val(u64),
    /// Chakra `sint32_val` (zigzag encoded).
    #[prost(sint32, tag = "15")]
    Sint32Val(i32),
    /// Chakra `sint64_val` (zigzag encoded).
    #[prost(sint64, tag = "17")]
    Sint64Val(i64),
    /// Chakra `fixed32_val`.
    #[prost(fixed32, tag = "19")]
    Fixed32Val(u32),
    /// Chakra `fixed64_val`.
    #[prost(fixed64, tag = "21")]
    Fixed64Val(u64),
    /// Chakra `sfixed32_val`.
    #[prost(sfixed32, tag = "23")]
    Sfixed32Val(i32),
    /// Chakra `sfixed64_val`.
    #[prost(sfixed64, tag = "25")]
    Sfixed64Val(i64),
    /// Chakra `bool_val`.
    #[prost(bool, tag = "27")]
    BoolVal(bool),
    /// Chakra `string_val`.
    #[prost(string, tag = "29")]
    StringVal(String),
}

/// `message Int64List { repeated int64 values = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Int64List {
    /// Chakra `Int64List.values`: the list's elements.
    #[prost(int64, repeated, tag = "1")]
    pub values: Vec<i64>,
}

/// `message GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GlobalMetadata {
    /// Chakra `GlobalMetadata.version`: the trace schema version, e.g. "0.0.4".
    #[prost(string, tag = "1")]
    pub version: String,
    /// Chakra `GlobalMetadata.attr`: trace-wide attributes.
    #[prost(message, repeated, tag = "2")]
    pub attr: Vec<AttributeProto>,
}

/// `enum NodeType`.
pub mod node_type {
    /// Chakra `INVALID_NODE`.
    pub const INVALID: i32 = 0;
    /// Chakra `METADATA_NODE`.
    pub const METADATA: i32 = 1;
    /// Chakra `MEM_LOAD_NODE`: a load from memory.
    pub const MEM_LOAD: i32 = 2;
    /// Chakra `MEM_STORE_NODE`: a store to memory.
    pub const MEM_STORE: i32 = 3;
    /// Chakra `COMP_NODE`: computation.
    pub const COMP: i32 = 4;
    /// Chakra `COMM_SEND_NODE`: a point-to-point send.
    pub const COMM_SEND: i32 = 5;
    /// Chakra `COMM_RECV_NODE`: a point-to-point receive.
    pub const COMM_RECV: i32 = 6;
    /// Chakra `COMM_COLL_NODE`: a collective.
    pub const COMM_COLL: i32 = 7;
}

/// `enum CollectiveCommType`.
pub mod comm_type {
    /// Chakra `ALL_REDUCE`.
    pub const ALL_REDUCE: i64 = 0;
    /// Chakra `REDUCE`.
    pub const REDUCE: i64 = 1;
    /// Chakra `ALL_GATHER`.
    pub const ALL_GATHER: i64 = 2;
    /// Chakra `GATHER`.
    pub const GATHER: i64 = 3;
    /// Chakra `SCATTER`.
    pub const SCATTER: i64 = 4;
    /// Chakra `BROADCAST`.
    pub const BROADCAST: i64 = 5;
    /// Chakra `ALL_TO_ALL`.
    pub const ALL_TO_ALL: i64 = 6;
    /// Chakra `REDUCE_SCATTER`.
    pub const REDUCE_SCATTER: i64 = 7;
    /// Chakra `REDUCE_SCATTER_BLOCK`.
    pub const REDUCE_SCATTER_BLOCK: i64 = 8;
    /// Chakra `BARRIER`.
    pub const BARRIER: i64 = 9;
}

/// `message IOInfo { string values = 1; string shapes = 2; string types = 3; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IoInfo {
    /// Chakra `IOInfo.values`: the tensors' values, as text.
    #[prost(string, tag = "1")]
    pub values: String,
    /// Chakra `IOInfo.shapes`: the tensors' shapes, as text.
    #[prost(string, tag = "2")]
    pub shapes: String,
    /// Chakra `IOInfo.types`: the tensors' element types, as text.
    #[prost(string, tag = "3")]
    pub types: String,
}

/// `message Node`: id 1, name 2, type 3, ctrl_deps 4, data_deps 5, start_time_micros 6,
/// duration_micros 7, inputs 8, outputs 9, attr 10.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Node {
    /// Chakra `Node.id`: the node's id, unique in its trace.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Chakra `Node.name`: the node's name, e.g. the kernel or op name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Chakra `Node.type`: a [`node_type`] value.
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    /// Chakra `Node.ctrl_deps`: ids of the nodes this one waits for (control dependencies).
    #[prost(uint64, repeated, tag = "4")]
    pub ctrl_deps: Vec<u64>,
    /// Chakra `Node.data_deps`: ids of the nodes whose outputs this one reads.
    #[prost(uint64, repeated, tag = "5")]
    pub data_deps: Vec<u64>,
    /// Chakra `Node.start_time_micros`: start time in the traced run, in microseconds.
    #[prost(uint64, tag = "6")]
    pub start_time_micros: u64,
    /// Chakra `Node.duration_micros`: duration in the traced run, in microseconds.
    #[prost(uint64, tag = "7")]
    pub duration_micros: u64,
    /// Chakra `Node.inputs`: the input tensors.
    #[prost(message, optional, tag = "8")]
    pub inputs: Option<IoInfo>,
    /// Chakra `Node.outputs`: the output tensors.
    #[prost(message, optional, tag = "9")]
    pub outputs: Option<IoInfo>,
    /// Chakra `Node.attr`: the node's attributes (`comm_type`, `comm_size`, `pg_name`, ...).
    #[prost(message, repeated, tag = "10")]
    pub attr: Vec<AttributeProto>,
}

impl AttributeProto {
    /// A signed integer attribute (`int64_val`).
    pub fn int(name: &str, v: i64) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::Int64Val(v)),
        }
    }
    /// An unsigned integer attribute (`uint64_val`).
    pub fn uint(name: &str, v: u64) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::Uint64Val(v)),
        }
    }
    /// A boolean attribute (`bool_val`).
    pub fn boolean(name: &str, v: bool) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::BoolVal(v)),
        }
    }
    /// A string attribute (`string_val`).
    pub fn string(name: &str, v: &str) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::StringVal(v.into())),
        }
    }

    /// An integer value of any integer encoding; `None` for other kinds.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match self.value.as_ref()? {
            AttrValue::Int32Val(v) | AttrValue::Sint32Val(v) | AttrValue::Sfixed32Val(v) => *v as i128,
            AttrValue::Int64Val(v) | AttrValue::Sint64Val(v) | AttrValue::Sfixed64Val(v) => *v as i128,
            AttrValue::Uint32Val(v) | AttrValue::Fixed32Val(v) => *v as i128,
            AttrValue::Uint64Val(v) | AttrValue::Fixed64Val(v) => *v as i128,
            AttrValue::BoolVal(b) => *b as i128,
            // Some converters write sizes as doubles.
            AttrValue::DoubleVal(d) if d.fract() == 0.0 && d.is_finite() => *d as i128,
            _ => return None,
        })
    }
}
