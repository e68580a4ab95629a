"""Writes the sample workload genai-pacer ships (genai_pacer/testing/data/prompts.jsonl, which
`genai-pacer bench` and `experiments` replay without --prompts): a synthetic stand-in for recorded
production prompts.

Four request types with the input and output lengths such workloads have (short tagging answers,
longer summaries, chat replies), so prefill and decode both show in the benchmark. Pass your own
recorded prompts (same fields) with --prompts to benchmark your workload.
Run: .venv/bin/python bench/make_prompts.py
"""

import json
import random

from genai_pacer.testing.bench import SAMPLE_PROMPTS

SENTENCES = [
    "The battery lasts two full days with moderate use and charges quickly.",
    "Customers mention that the strap feels cheap compared with the rest of the device.",
    "Shipping took longer than promised, but support replied within an hour.",
    "Quarterly revenue grew eight percent while operating margin narrowed slightly.",
    "Analysts expect guidance to be revised after the supply constraints ease.",
    "The update fixed the login loop but introduced a slower start-up on older phones.",
    "Several reviewers compare the sound quality favourably with more expensive models.",
    "The company announced a buyback programme and a higher dividend for the next year.",
]
KINDS = [
    # kind, instruction, input sentences (min, max), output tokens (min, max)
    ("review-summary", "Summarize these product reviews in five bullet points.", (40, 90), (120, 260)),
    ("article-tags", "Return up to eight topic tags for this article as a JSON list.", (30, 60), (20, 60)),
    ("support-chat", "Answer the customer's question politely and precisely.", (8, 25), (150, 420)),
    ("ticker-brief", "Write a morning brief for this ticker from the notes below.", (60, 110), (200, 360)),
]


def main() -> None:
    rng = random.Random(7)
    lines = []
    for number in range(48):
        kind, instruction, (low, high), (out_low, out_high) = KINDS[number % len(KINDS)]
        body = " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(low, high)))
        lines.append(json.dumps({
            "id": f"{kind}-{number:02d}",
            "system": "You are a concise assistant for an online retailer and brokerage.",
            "prompt": f"{instruction}\n\n{body}",
            "expected_output_tokens": rng.randint(out_low, out_high),
        }))
    SAMPLE_PROMPTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
