from ayci.worker import main

main("archiver")
