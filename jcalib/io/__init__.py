"""Outside formats: SBML models (`jcalib.io.sbml`) and PEtab problems (`jcalib.io.petab`)."""
