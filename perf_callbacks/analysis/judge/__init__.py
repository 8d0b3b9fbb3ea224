"""The verdict and the advice: losses by cause, the evidence behind them, the fixes and what each would gain."""
