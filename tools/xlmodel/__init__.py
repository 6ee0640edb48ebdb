"""xlmodel: reading and writing xlserve model directories (HF TransfoXL layout) with numpy only."""
