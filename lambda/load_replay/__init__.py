"""The Lambda behind genai_pacer.bench.LoadReplay: plans a run, replays a worker's share, summarizes."""
