"""The results as data: per rank and per window, their recommendations and TensorBoard headline figures."""
