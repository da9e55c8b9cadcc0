//! A constrained step's mask, found by one walk of the vocabulary's trie,
//! equals asking each token in turn (`Constraint::allows`), on the real
//! SmolLM2 (49,152 tokens) and Qwen2.5 (151,665) vocabularies, at every
//! token of a JSON-mode answer and of a forced tool call (a schema whose
//! `anyOf` forks the automaton). The time of each way is printed, not
//! asserted (a speed is measured, not tested).

use graphc::json_schema::Schema;
use graphc::sampling::Constraint;
use graphc::{CompileOptions, Model};
use graphc_tests::{model as checkpoint, smollm2};
use serde_json::json;
use std::sync::Arc;

fn check(m: &Model, text: &str, mut c: Constraint) {
    let vocab = m.vocabulary().unwrap();
    let ids = m.tokenizer().unwrap().encode_text(text, false).unwrap();
    let spelled: usize = (0..vocab.len()).map(|i| vocab.get(i).unwrap().len()).sum();
    let mut steps = 0;
    let (mut t_walk, mut t_each) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for &id in ids.iter().chain(&[u32::MAX]) {
        let t0 = std::time::Instant::now();
        let walked = c.allowed();
        let t1 = std::time::Instant::now();
        let each: Vec<bool> = (0..vocab.len() as u32).map(|t| c.allows(t)).collect();
        t_walk += t1 - t0;
        t_each += t1.elapsed();
        assert_eq!(walked.len(), each.len());
        if let Some(t) = (0..each.len()).find(|&t| walked[t] != each[t]) {
            panic!("after {steps} tokens of {text:?}: token {t} ({:?}) walked {} each {}", vocab.get(t), walked[t], each[t]);
        }
        if id == u32::MAX {
            break;
        }
        assert!(each[id as usize], "the text's own token {id} at step {steps} must be allowed");
        c.advance(id);
        steps += 1;
    }
    println!(
        "{text:?}: {steps} steps, masks equal over {} tokens ({} bytes, {} trie nodes); walk {:.2} ms a step, each token {:.2} ms",
        vocab.len(),
        spelled,
        vocab.nodes(),
        t_walk.as_secs_f64() * 1e3 / (steps + 1) as f64,
        t_each.as_secs_f64() * 1e3 / (steps + 1) as f64
    );
}

#[test]
fn the_walked_mask_equals_each_token_asked() {
    let tool = json!({"anyOf": [
        {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}, "required": ["name", "arguments"]},
        {"type": "object", "properties": {"name": {"const": "scale"}, "arguments": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}, "required": ["name", "arguments"]}
    ]});
    let schema = Arc::new(Schema::compile(&tool, "tool").unwrap());
    for path in [smollm2(), checkpoint("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")] {
        let m = Model::compile(&path, &CompileOptions { max_seq: Some(64), ..Default::default() }, None).unwrap();
        let (vocab, ends) = (m.vocabulary().unwrap(), m.plan().model.stop_ids.clone());
        check(&m, "{\"answer\": [1, 2.5e3, \"Tōkyō 東京\", {\"ok\": true}], \"n\": null}", Constraint::json_object(vocab.clone(), ends.clone()));
        check(
            &m,
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
            Constraint::json_schema(vocab, ends, schema.clone()),
        );
    }
}
