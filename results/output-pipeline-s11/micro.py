import sys, time, timeit
sys.path.insert(0, sys.argv[1])
from engines.protocol import GenerationRequest, SamplingParams
from engines.rate import TokenRate
from engines.tokenizer import FastTokenizer
from engines.model_ref import resolve_model
tok = FastTokenizer.from_dir(resolve_model("builtin:tiny"))
ids = tok.encode("The quick brown fox jumps over the lazy dog. " * 20, add_special_tokens=False)[:64]
req = GenerationRequest("r", [1, 2, 3], SamplingParams(max_tokens=64))
rate = TokenRate()
def run_after():
    from engines.output import OutputStream
    s = OutputStream(req, rate, tokenizer=tok, stop_ids={-1})
    for i, t in enumerate(ids):
        s.from_ids([t], completion_tokens=i + 1, engine_finished=i == 63, length_reached=i == 63)
def run_before():
    from engines.output_text import OutputText
    from engines.protocol import Delta
    o = OutputText(tok, req.sampling, {-1}); last = None; ftt = None
    for i, t in enumerate(ids):
        text, finish = o.feed([t], engine_finished=i == 63, length_reached=i == 63)
        if ftt is None: ftt = time.time()
        last = rate.delivered(1, last)
        Delta(text=text, token_ids=[t], finish_reason=finish, prompt_tokens=3, completion_tokens=i + 1, first_token_time=ftt, arrival_time=req.arrival_time)
fn = run_before if sys.argv[2] == "before" else run_after
best = min(timeit.repeat(fn, number=20, repeat=5)) / (20 * 64)
print(sys.argv[2], f"{best*1e6:.2f} us/step (1 token a step)")
