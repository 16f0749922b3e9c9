"""The environment variables through which a worker's OCR run (docjobs/pdf/ocr_process.py) tells the OCRmyPDF plugin
in its child (docjobs/pdf/_ocr_child.py) what to do. The standard library only, and nothing else here: the plugin,
which imports nothing from docjobs, loads this file by its path."""

TAG_ENV = "DOCJOBS_OCR_TAG"  # on every program a run starts: its session can be found in /proc
EVENT_FD_ENV = "DOCJOBS_OCR_EVENT_FD"  # the pipe the plugin writes its events on
PARENT_PID_ENV = "DOCJOBS_OCR_PARENT_PID"  # the process whose death ends the run
CONDITION_ENV = "DOCJOBS_OCR_CONDITION"  # condition the OCR image (the retry)
CHECKPOINTS_ENV = "DOCJOBS_OCR_CHECKPOINTS"  # where each page's words are left as read
RESUME_ENV = "DOCJOBS_OCR_RESUME"  # an earlier attempt's checkpoints
SHARE_ENV = "DOCJOBS_OCR_SHARE"  # how many Tesseract calls may run at once
