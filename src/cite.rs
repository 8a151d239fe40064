//! Placeholder marker tracker (replaced by the real one from the `cite` branch).
#![allow(missing_docs, dead_code)]

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OffsetUnit {
    #[default]
    Chars,
    Utf16,
    Bytes,
}

impl std::str::FromStr for OffsetUnit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chars" => Ok(OffsetUnit::Chars),
            "utf16" => Ok(OffsetUnit::Utf16),
            "bytes" => Ok(OffsetUnit::Bytes),
            _ => Err(s.into()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Marker {
    pub number: u32,
    pub start: u64,
    pub end: u64,
}

#[derive(Clone, Debug)]
pub struct MarkerTracker {
    max: u32,
    unit: OffsetUnit,
    raw: Vec<u8>,
    markers: Vec<Marker>,
    done: bool,
}

impl MarkerTracker {
    pub fn new(max_number: u32, unit: OffsetUnit) -> Self {
        MarkerTracker {
            max: max_number,
            unit,
            raw: Vec::new(),
            markers: Vec::new(),
            done: false,
        }
    }
    pub fn push_json(&mut self, escaped: &[u8]) {
        self.raw.extend_from_slice(escaped);
    }
    pub fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let s = crate::json::decode_str(&self.raw).into_owned();
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '[' && (i == 0 || chars[i - 1] != '\\') {
                let mut j = i + 1;
                while j < chars.len() && chars[j].is_ascii_digit() && j - i <= 4 {
                    j += 1;
                }
                if j < chars.len()
                    && chars[j] == ']'
                    && j > i + 1
                    && chars[i + 1] != '0'
                    && j - i - 1 <= 4
                {
                    let n: u32 = chars[i + 1..j]
                        .iter()
                        .collect::<String>()
                        .parse()
                        .unwrap_or(0);
                    if n >= 1 && n <= self.max {
                        self.markers.push(Marker {
                            number: n,
                            start: i as u64,
                            end: j as u64 + 1,
                        });
                    }
                }
            }
            i += 1;
        }
    }
    pub fn markers(&self) -> &[Marker] {
        &self.markers
    }
    pub fn take_markers(&mut self) -> Vec<Marker> {
        std::mem::take(&mut self.markers)
    }
}
