"""The book's running example, "Your journey starts with one step".

Six tokens with hand-picked 3-d embeddings (Raschka, "Build a Large Language Model (From
Scratch)", section 3.3). The numbers are chosen so that related words point alike
("journey" and "starts"), which makes every attention weight easy to read.
"""
import torch

JOURNEY_WORDS = ["Your", "journey", "starts", "with", "one", "step"]

_JOURNEY = [
    [0.43, 0.15, 0.89],  # Your
    [0.55, 0.87, 0.66],  # journey
    [0.57, 0.85, 0.64],  # starts
    [0.22, 0.58, 0.33],  # with
    [0.77, 0.25, 0.10],  # one
    [0.05, 0.80, 0.55],  # step
]


def journey_inputs(device=None) -> torch.Tensor:
    """The (6, 3) float32 input embeddings, a fresh tensor on every call (on `device`)."""
    return torch.tensor(_JOURNEY, dtype=torch.float32, device=device)
